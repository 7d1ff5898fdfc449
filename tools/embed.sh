#!/bin/sh
# embed.sh NAME FILE - print a C file holding FILE's bytes as the array NAME
# (NUL-terminated, for the reader's convenience) and its length NAME_len.
# The Makefile embeds the dashboard (src/server/dash.html) with it, so emberd
# serves the page from its own binary.
set -e
name=$1
file=$2
echo "/* generated from $file by tools/embed.sh: do not edit */"
echo "#include <stddef.h>"
echo "const unsigned char $name[] = {"
od -An -v -tu1 "$file" | awk '{ for (i = 1; i <= NF; i++) printf "%s,", $i; printf "\n" }'
echo "0 };"
echo "const size_t ${name}_len = sizeof $name - 1;"
