/* main.c - entry point shared by the unit and integration test binaries. */
#include "test.h"

int main(int argc, char **argv) { return test_main(argc, argv); }
