# ember - build, test, run.  `make run` and `make test` install what they need
# (tools/deps.sh) on a fresh Debian 12 machine.  Output goes under build/.
#
#   make            libember.a, emberd, ember-cli, ember-bench, test binaries
#   make test       everything, then every suite; last line "N passed, N failed"
#   make run        emberd in the foreground on 127.0.0.1:10800
#   make asan       unit + integration suites under ASan + UBSan (build/asan)
#   make tsan       the same under ThreadSanitizer (build/tsan)
#   make bench      micro benchmarks (ember-bench micro all)
#   make bench-net  network grid vs redis and memcached (tools/bench-net.sh)
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
EXTRA_LIBS ?= -linih -lssl -lcrypto -lsqlite3

LIB_DIRS  := util binary store wal net sql proto cluster
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
ifneq ($(wildcard tests/stress/adversary.c),)
BINS += $(BUILD)/ember-adversary
endif
ifneq ($(wildcard tests/stress/soak.c),)
BINS += $(BUILD)/ember-soak
endif

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

# libFuzzer builds (clang + libclang-rt-14-dev): the library is compiled once
# per FUZZ_BUILD with coverage hooks (fuzzer-no-link) and ASan + UBSan, then
# each target links against it.  tests/scripts/fuzz.sh runs every target for
# FUZZ_SECONDS, keeps the growing corpus in FUZZ_BUILD/corpus-<name> and any
# crash in FUZZ_BUILD/artifacts/<name>/ (turn it into a regression file in
# tests/fuzz/corpus/<name>/).  `make test` runs the same script briefly.
FUZZ_BUILD ?= build/fuzz
FUZZ_CFLAGS := -std=c11 -D_GNU_SOURCE -g -O1 -Isrc -Iinclude -fno-omit-frame-pointer \
               -fsanitize=address,undefined -fno-sanitize-recover=undefined
FUZZ_LIB_OBJ := $(LIB_SRC:%.c=$(FUZZ_BUILD)/obj/%.o)
FUZZ_SECONDS ?= 60
$(FUZZ_BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	clang $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -MMD -MP -c $< -o $@
$(FUZZ_BUILD)/libember-fuzz.a: $(FUZZ_LIB_OBJ)
	rm -f $@
	ar rcs $@ $^
$(FUZZ_BUILD)/fuzz_%: $(FUZZ_BUILD)/obj/tests/fuzz/fuzz_%.o $(FUZZ_BUILD)/libember-fuzz.a
	clang $(FUZZ_CFLAGS) -fsanitize=fuzzer -o $@ $^ -lpthread -lm $(EXTRA_LIBS)

.PHONY: fuzz-build
fuzz-build: $(FUZZ_NAMES:%=$(FUZZ_BUILD)/%)
# Keep the fuzz objects (make would delete them as intermediates and rebuild
# them on every run).
.SECONDARY: $(FUZZ_NAMES:%=$(FUZZ_BUILD)/obj/tests/fuzz/%.o) \
            $(FUZZ_NAMES:%=$(BUILD)/tests/fuzz/%.o) $(BUILD)/tests/fuzz/replay_main.o

fuzz: deps
	@$(MAKE) --no-print-directory fuzz-build
	@FUZZ_BUILD=$(FUZZ_BUILD) FUZZ_SECONDS=$(FUZZ_SECONDS) FUZZ_NOBUILD=1 tests/scripts/fuzz.sh

# Reliability drivers (tests/stress/): a live adversarial client and a soak
# client for a running emberd; tests/scripts/adversary.sh and soak.sh run them.
STRESS_COMMON := $(BUILD)/tests/stress/stress.o
$(BUILD)/ember-adversary: $(BUILD)/tests/stress/adversary.o $(STRESS_COMMON) $(LIB)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)
$(BUILD)/ember-soak: $(BUILD)/tests/stress/soak.o $(STRESS_COMMON) $(LIB)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

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

# N1 network grid: emberd vs redis-server vs memcached (tools/bench-net.sh);
# writes README.md's bench-net block, docs/bench-net.csv and docs/bench-net.svg.
.PHONY: bench-net
bench-net: deps
	@$(MAKE) --no-print-directory $(BUILD)/ember-bench $(BUILD)/emberd
	BUILD=$(BUILD) tools/bench-net.sh

PREFIX ?= /usr/local
install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib $(DESTDIR)$(PREFIX)/include
	install -m 755 $(BUILD)/emberd $(DESTDIR)$(PREFIX)/bin/
	-install -m 755 $(BUILD)/ember-cli $(BUILD)/ember-bench $(DESTDIR)$(PREFIX)/bin/
	install -m 644 $(LIB) $(DESTDIR)$(PREFIX)/lib/
	install -m 644 include/ember.h $(DESTDIR)$(PREFIX)/include/
	install -d $(DESTDIR)$(PREFIX)/lib/systemd/system $(DESTDIR)$(PREFIX)/share/doc/ember
	sed 's|/usr/local|$(PREFIX)|g' packaging/emberd.service \
	  > $(DESTDIR)$(PREFIX)/lib/systemd/system/emberd.service
	install -m 644 packaging/emberd.ini docs/operations.md $(DESTDIR)$(PREFIX)/share/doc/ember/

clean:
	rm -rf build

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
