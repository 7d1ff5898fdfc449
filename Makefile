# ember - build, test, run.  `make run` and `make test` install what they need
# (tools/deps.sh) on a fresh Debian 12 machine.  Output goes under build/.
#
#   make            libember.a, emberd, ember-cli, ember-bench, test binaries
#   make test       everything, then every suite; last line "N passed, N failed"
#   make run        emberd in the foreground on 127.0.0.1:10800
#   make asan       unit + integration suites under ASan + UBSan (build/asan)
#   make tsan       the same under ThreadSanitizer (build/tsan)
#   make bench      micro benchmarks (ember-bench micro all)
#   make fuzz       each libFuzzer target for FUZZ_SECONDS

CC      ?= gcc
BUILD   ?= build
OPT     ?= -O2
SAN     ?=
CFLAGS_BASE := -std=c11 -D_GNU_SOURCE -Wall -Wextra -Wpedantic -Wno-format-truncation \
               -Wshadow -Wstrict-prototypes -g $(OPT) $(SAN) -Isrc -Iinclude -MMD -MP
ifeq ($(CI),true)
CFLAGS_BASE += -Werror
endif
CFLAGS  += $(CFLAGS_BASE)
LDFLAGS += $(SAN)
LDLIBS  += -lpthread -lm $(EXTRA_LIBS)
# Libraries from Debian used by the server layers (tools/deps.sh installs them).
EXTRA_LIBS ?= -linih -lssl -lcrypto

LIB_DIRS  := util binary store wal net proto cluster
LIB_SRC   := $(foreach d,$(LIB_DIRS),$(wildcard src/$(d)/*.c)) \
             $(filter-out src/server/emberd.c,$(wildcard src/server/*.c))
LIB_OBJ   := $(LIB_SRC:%.c=$(BUILD)/%.o)
LIB       := $(BUILD)/libember.a

TEST_LIB_OBJ := $(patsubst %.c,$(BUILD)/%.o,$(wildcard tests/lib/*.c))
UNIT_OBJ  := $(patsubst %.c,$(BUILD)/%.o,$(wildcard tests/unit/*.c))
INTEG_OBJ := $(patsubst %.c,$(BUILD)/%.o,$(wildcard tests/integration/*.c))
BENCH_OBJ := $(patsubst %.c,$(BUILD)/%.o,$(wildcard bench/*.c))
CLI_OBJ   := $(patsubst %.c,$(BUILD)/%.o,$(wildcard tools/cli/*.c))
WALT_OBJ  := $(patsubst %.c,$(BUILD)/%.o,$(wildcard tools/wal/*.c))
FUZZ_SRC  := $(wildcard tests/fuzz/fuzz_*.c)
FUZZ_NAMES := $(FUZZ_SRC:tests/fuzz/%.c=%)

BINS := $(BUILD)/unit-tests $(BUILD)/ember-bench
ifneq ($(wildcard src/server/emberd.c),)
BINS += $(BUILD)/emberd
endif
ifneq ($(INTEG_OBJ),)
BINS += $(BUILD)/integration-tests
endif
ifneq ($(CLI_OBJ),)
BINS += $(BUILD)/ember-cli
endif
ifneq ($(WALT_OBJ),)
BINS += $(BUILD)/ember-wal
endif
BINS += $(FUZZ_NAMES:%=$(BUILD)/replay/%)

.PHONY: all deps test run asan tsan bench fuzz clean install
all: $(BINS)

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Itests/lib -c $< -o $@

$(LIB): $(LIB_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@
	ar rcs $@ $^

$(BUILD)/emberd: $(BUILD)/src/server/emberd.o $(LIB)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)
$(BUILD)/unit-tests: $(UNIT_OBJ) $(TEST_LIB_OBJ) $(LIB)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)
$(BUILD)/integration-tests: $(INTEG_OBJ) $(TEST_LIB_OBJ) $(LIB)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)
$(BUILD)/ember-bench: $(BENCH_OBJ) $(LIB)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)
$(BUILD)/ember-cli: $(CLI_OBJ) $(LIB)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)
$(BUILD)/ember-wal: $(WALT_OBJ) $(LIB)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# Fuzz targets: built twice.  replay/<name> (gcc, any build) runs the stored
# corpus through the target in `make test`; fuzz/<name> (clang + libFuzzer)
# explores in `make fuzz`.
$(BUILD)/replay/%: $(BUILD)/tests/fuzz/%.o $(BUILD)/tests/fuzz/replay_main.o $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

FUZZ_FLAGS := -std=c11 -D_GNU_SOURCE -g -O1 -Isrc -Iinclude -fsanitize=fuzzer,address,undefined
FUZZ_SECONDS ?= 60
build/fuzz/%: tests/fuzz/%.c $(LIB_SRC)
	@mkdir -p $(dir $@)
	clang $(FUZZ_FLAGS) -o $@ $< $(LIB_SRC) -lpthread -lm $(EXTRA_LIBS)

fuzz: deps $(FUZZ_NAMES:%=build/fuzz/%)
	@for t in $(FUZZ_NAMES); do \
	  mkdir -p build/fuzz/corpus-$$t; \
	  echo "== $$t ($(FUZZ_SECONDS)s)"; \
	  build/fuzz/$$t -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 \
	    build/fuzz/corpus-$$t tests/fuzz/corpus/$$t || exit 1; \
	done

deps:
	@tools/deps.sh

test: deps
	@$(MAKE) --no-print-directory all
	@tools/run-tests.sh $(BUILD)

run: deps
	@$(MAKE) --no-print-directory $(BUILD)/emberd
	$(BUILD)/emberd

asan: deps
	@$(MAKE) --no-print-directory BUILD=build/asan OPT=-O1 \
	  SAN="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined" all
	@EM_SANITIZER=asan tools/run-tests.sh build/asan --no-node

tsan: deps
	@$(MAKE) --no-print-directory BUILD=build/tsan OPT=-O1 SAN="-fsanitize=thread" all
	@EM_SANITIZER=tsan tools/run-tests.sh build/tsan --no-node

bench: deps
	@$(MAKE) --no-print-directory $(BUILD)/ember-bench
	$(BUILD)/ember-bench micro all

PREFIX ?= /usr/local
install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib $(DESTDIR)$(PREFIX)/include
	install -m 755 $(BUILD)/emberd $(DESTDIR)$(PREFIX)/bin/
	-install -m 755 $(BUILD)/ember-cli $(BUILD)/ember-bench $(DESTDIR)$(PREFIX)/bin/
	install -m 644 $(LIB) $(DESTDIR)$(PREFIX)/lib/
	install -m 644 include/ember.h $(DESTDIR)$(PREFIX)/include/

clean:
	rm -rf build

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
