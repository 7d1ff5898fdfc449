# ember - build, test, run.  `make run` and `make test` install what they need
# (tools/deps.sh) on a fresh Debian 12 machine.  Output goes under build/.
#
#   make            libember.a, emberd, ember-cli, ember-bench, test binaries
#   make test       everything, then every suite; last line "N passed, N failed"
#   make run        emberd in the foreground on 127.0.0.1:10800
#   make run-cluster 3 nodes in the foreground (tools/cluster.sh run 3)
#   make asan       unit + integration suites under ASan + UBSan (build/asan)
#   make replay     the fuzz-corpus replays, built with ASan + UBSan (build/asan)
#   make tsan       the same under ThreadSanitizer (build/tsan)
#   make bench      micro benchmarks (ember-bench micro all)
#   make bench-net  network grid vs redis and memcached (tools/bench-net.sh)
#   make fuzz       each libFuzzer target for FUZZ_SECONDS

# Compile on every CPU unless the caller chose a job count: a serial build
# of the four build trees CI makes (normal, ASan, TSan, fuzz) took minutes of
# its half hour.  The suites themselves run one after another in recipes.
ifeq ($(filter -j%,$(MAKEFLAGS)),)
MAKEFLAGS += -j$(shell nproc)
endif

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
# The DEFLATE codec of the exchange's compressed messages (src/cluster/cl_zip.c
# says why libdeflate is the default): CL_ZIP=zlib builds the streaming zlib one.
CL_ZIP ?= libdeflate
ifeq ($(CL_ZIP),zlib)
ZIP_DEF := -DCL_ZIP_ZLIB
ZIP_LIB := -lz
else
ZIP_DEF :=
ZIP_LIB := -ldeflate
endif
CFLAGS  += $(ZIP_DEF)
# Libraries from Debian used by the server layers (tools/deps.sh installs them).
EXTRA_LIBS ?= -linih -lssl -lcrypto -lraft -luv -lsqlite3 $(ZIP_LIB)
# ember-bench only: liburing for `ember-bench floor --uring` (the servers do
# not link it).
BENCH_LIBS ?= -luring

LIB_DIRS  := util binary store wal net sql proto cluster
LIB_SRC   := $(foreach d,$(LIB_DIRS),$(wildcard src/$(d)/*.c)) \
             $(filter-out src/server/emberd.c,$(wildcard src/server/*.c))
LIB_OBJ   := $(LIB_SRC:%.c=$(BUILD)/%.o) $(BUILD)/gen/dash_html.o
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
ifneq ($(wildcard tests/stress/adversary.c),)
BINS += $(BUILD)/ember-adversary
endif
ifneq ($(wildcard tests/stress/soak.c),)
BINS += $(BUILD)/ember-soak
endif
ifneq ($(wildcard tests/stress/chaos.c),)
BINS += $(BUILD)/ember-chaos
endif
ifneq ($(wildcard tests/stress/txc.c),)
BINS += $(BUILD)/ember-txc
endif
ifneq ($(wildcard tests/sim/sim_meta.c),)
BINS += $(BUILD)/ember-sim $(BUILD)/plant/ember-sim-no_io_guard
BINS += $(BUILD)/ember-sim-own $(BUILD)/plant/ember-sim-own-no_switch
endif
# emberd with one planted replication bug each (src/cluster/cl_repl.c says
# which), and one transaction bug (src/proto/proto_txp.c), for
# tests/chaos/planted.sh: the checkers must catch them.
PLANTS := ack_early no_resend
TX_PLANTS := no_shadow
BINS += $(PLANTS:%=$(BUILD)/plant/emberd-%) $(TX_PLANTS:%=$(BUILD)/plant/emberd-%)

.PHONY: all deps test run run-cluster asan tsan trace bench fuzz clean install replay replay-bins chaos
all: $(BINS)

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Itests/lib -c $< -o $@

# The dashboard page, embedded in the binary (src/server/dash.h).
$(BUILD)/gen/dash_html.c: src/server/dash.html tools/embed.sh
	@mkdir -p $(dir $@)
	sh tools/embed.sh srv_dash_html $< > $@.tmp && mv $@.tmp $@
$(BUILD)/gen/dash_html.o: $(BUILD)/gen/dash_html.c
	$(CC) $(CFLAGS) -c $< -o $@

$(LIB): $(LIB_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@
	ar rcs $@ $^

$(BUILD)/emberd: $(BUILD)/src/server/emberd.o $(LIB)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)
# The planted object comes before the library, so the linker never takes the
# library's own cl_repl.o.
# Static patterns: a loose one would also match the dependency files' names
# (make's built-in rules try to remake cl_repl-X.d from cl_repl-X.d.o).
PLANT_OBJ := $(PLANTS:%=$(BUILD)/plant/cl_repl-%.o)
$(PLANT_OBJ): $(BUILD)/plant/cl_repl-%.o: src/cluster/cl_repl.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -DEM_PLANT_$(shell echo $* | tr a-z A-Z) -c -o $@ $<
$(PLANTS:%=$(BUILD)/plant/emberd-%): $(BUILD)/plant/emberd-%: $(BUILD)/src/server/emberd.o \
		$(BUILD)/plant/cl_repl-%.o $(LIB)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)
TX_PLANT_OBJ := $(TX_PLANTS:%=$(BUILD)/plant/proto_txp-%.o)
$(TX_PLANT_OBJ): $(BUILD)/plant/proto_txp-%.o: src/proto/proto_txp.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -DEM_PLANT_$(shell echo $* | tr a-z A-Z) -c -o $@ $<
$(TX_PLANTS:%=$(BUILD)/plant/emberd-%): $(BUILD)/plant/emberd-%: $(BUILD)/src/server/emberd.o \
		$(BUILD)/plant/proto_txp-%.o $(LIB)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)
$(BUILD)/unit-tests: $(UNIT_OBJ) $(TEST_LIB_OBJ) $(LIB)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)
$(BUILD)/integration-tests: $(INTEG_OBJ) $(TEST_LIB_OBJ) $(LIB)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)
$(BUILD)/ember-bench: $(BENCH_OBJ) $(LIB)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS) $(BENCH_LIBS)
$(BUILD)/ember-cli: $(CLI_OBJ) $(LIB)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)
$(BUILD)/ember-wal: $(WALT_OBJ) $(LIB)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# Fuzz targets: built twice.  ASAN_BUILD/replay/<name> ($(CC) with ASan +
# UBSan, the objects of `make asan`) runs the stored corpus through the
# target in every tools/run-tests.sh run, one test per target; fuzz/<name>
# (clang + libFuzzer) explores in `make fuzz`.  replay-canary, a target with
# planted bugs, checks that the replay really catches sanitizer reports.
ASAN_BUILD ?= build/asan
ASAN_VARS  := BUILD=$(ASAN_BUILD) OPT=-O1 \
  SAN="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined"
REPLAY_BINS := $(FUZZ_NAMES:%=$(BUILD)/replay/%) $(BUILD)/replay-canary
$(BUILD)/replay/%: $(BUILD)/tests/fuzz/%.o $(BUILD)/tests/fuzz/replay_main.o $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)
$(BUILD)/replay-canary: $(BUILD)/tests/fuzz/replay_canary.o $(BUILD)/tests/fuzz/replay_main.o
	$(CC) $(LDFLAGS) -o $@ $^
# replay-bins: the replays in this BUILD (call it with ASAN_VARS); replay:
# the same in ASAN_BUILD, from any build.
replay-bins: $(REPLAY_BINS)
replay:
	@$(MAKE) --no-print-directory $(ASAN_VARS) replay-bins

# libFuzzer builds (clang + libclang-rt-14-dev): the library is compiled once
# per FUZZ_BUILD with coverage hooks (fuzzer-no-link) and ASan + UBSan, then
# each target links against it.  tests/scripts/fuzz.sh runs every target for
# FUZZ_SECONDS, keeps the growing corpus in FUZZ_BUILD/corpus-<name> and any
# crash in FUZZ_BUILD/artifacts/<name>/ (turn it into a regression file in
# tests/fuzz/corpus/<name>/).  `make test` runs the same script briefly.
FUZZ_BUILD ?= build/fuzz
FUZZ_CFLAGS := -std=c11 -D_GNU_SOURCE -g -O1 -Isrc -Iinclude $(ZIP_DEF) -fno-omit-frame-pointer \
               -fsanitize=address,undefined -fno-sanitize-recover=undefined
FUZZ_LIB_OBJ := $(LIB_SRC:%.c=$(FUZZ_BUILD)/obj/%.o) $(FUZZ_BUILD)/obj/gen/dash_html.o
FUZZ_SECONDS ?= 60
FUZZ_CC ?= clang
$(FUZZ_BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -MMD -MP -c $< -o $@
$(FUZZ_BUILD)/obj/gen/dash_html.o: $(BUILD)/gen/dash_html.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -c $< -o $@
$(FUZZ_BUILD)/libember-fuzz.a: $(FUZZ_LIB_OBJ)
	rm -f $@
	ar rcs $@ $^
$(FUZZ_BUILD)/fuzz_%: $(FUZZ_BUILD)/obj/tests/fuzz/fuzz_%.o $(FUZZ_BUILD)/libember-fuzz.a
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer -o $@ $^ -lpthread -lm $(EXTRA_LIBS)

.PHONY: fuzz-build
fuzz-build: $(FUZZ_NAMES:%=$(FUZZ_BUILD)/%)
# Keep the fuzz objects (make would delete them as intermediates and rebuild
# them on every run).
.SECONDARY: $(FUZZ_NAMES:%=$(FUZZ_BUILD)/obj/tests/fuzz/%.o) \
            $(FUZZ_NAMES:%=$(BUILD)/tests/fuzz/%.o) $(BUILD)/tests/fuzz/replay_main.o \
            $(BUILD)/tests/fuzz/replay_canary.o

fuzz: deps
	@$(MAKE) --no-print-directory fuzz-build
	@FUZZ_BUILD=$(FUZZ_BUILD) FUZZ_CC=$(FUZZ_CC) FUZZ_SECONDS=$(FUZZ_SECONDS) FUZZ_NOBUILD=1 tests/scripts/fuzz.sh

# Reliability drivers (tests/stress/): a live adversarial client and a soak
# client for a running emberd; tests/scripts/adversary.sh and soak.sh run them.
STRESS_COMMON := $(BUILD)/tests/stress/stress.o
$(BUILD)/ember-adversary: $(BUILD)/tests/stress/adversary.o $(STRESS_COMMON) $(LIB)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)
$(BUILD)/ember-soak: $(BUILD)/tests/stress/soak.o $(STRESS_COMMON) $(LIB)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)
$(BUILD)/ember-chaos: $(BUILD)/tests/stress/chaos.o $(STRESS_COMMON) $(LIB)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)
$(BUILD)/ember-txc: $(BUILD)/tests/stress/txc.o $(STRESS_COMMON) $(LIB)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)
# The deterministic simulation of the metadata group (tests/sim/), and its
# planted twin: cl_meta_raft.c built without its io guard (libraft 0.15's
# faults come back), linked before the library so the linker never takes
# the library's own cl_meta_raft.o.
$(BUILD)/ember-sim: $(BUILD)/tests/sim/sim_meta.o $(LIB)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)
$(BUILD)/plant/cl_meta_raft-no_io_guard.o: src/cluster/cl_meta_raft.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -DEM_PLANT_NO_IO_GUARD -c -o $@ $<
$(BUILD)/plant/ember-sim-no_io_guard: $(BUILD)/tests/sim/sim_meta.o \
		$(BUILD)/plant/cl_meta_raft-no_io_guard.o $(LIB)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# The ownership simulation (tests/sim/sim_own.c) and its planted twin:
# cl_plan.c moving a primary without moving the topology version.
$(BUILD)/ember-sim-own: $(BUILD)/tests/sim/sim_own.o $(LIB)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)
$(BUILD)/plant/cl_plan-no_switch.o: src/cluster/cl_plan.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -DEM_PLANT_NO_SWITCH -c -o $@ $<
$(BUILD)/plant/ember-sim-own-no_switch: $(BUILD)/tests/sim/sim_own.o \
		$(BUILD)/plant/cl_plan-no_switch.o $(LIB)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

deps:
	@tools/deps.sh

test: deps
	@$(MAKE) --no-print-directory all
	@$(MAKE) --no-print-directory replay
	@REPLAY_BUILD=$(ASAN_BUILD) FUZZ_BUILD=$(FUZZ_BUILD) FUZZ_CC=$(FUZZ_CC) tools/run-tests.sh $(BUILD)

run: deps
	@$(MAKE) --no-print-directory $(BUILD)/emberd
	$(BUILD)/emberd

# 3 local nodes on 127.0.0.1-3 (thin ports 10800-10802) until Ctrl-C; logs in
# ./ember-cluster.  tools/cluster.sh start/stop does the same in the background.
run-cluster: deps
	@$(MAKE) --no-print-directory $(BUILD)/emberd $(BUILD)/ember-cli
	EMBERD=$(BUILD)/emberd tools/cluster.sh run 3

asan: deps
	@$(MAKE) --no-print-directory $(ASAN_VARS) all replay-bins
	@EM_SANITIZER=asan REPLAY_BUILD=$(ASAN_BUILD) tools/run-tests.sh $(ASAN_BUILD) --no-node

# The corpus replays stay ASan builds here too (TSan has nothing to find in
# one thread, and the replay must catch memory errors wherever it runs).
tsan: deps
	@$(MAKE) --no-print-directory BUILD=build/tsan OPT=-O1 SAN="-fsanitize=thread" all
	@$(MAKE) --no-print-directory replay
	@TSAN_OPTIONS="suppressions=$(CURDIR)/tools/tsan.supp $$TSAN_OPTIONS" EM_SANITIZER=tsan \
	    REPLAY_BUILD=$(ASAN_BUILD) tools/run-tests.sh build/tsan --no-node

# The allocation-trace build: emberd writes every allocation made between
# two DEBUG_STATS requests (--debug-ops) with a backtrace to its log, e.g.
#   make trace && EMBER_BUILD=build/trace CHAOS_KEEP=1 sh tests/chaos/cluster_repl.sh
# to find what breaks a 0 B/op check.
trace: deps
	@$(MAKE) --no-print-directory BUILD=build/trace SAN="-DEM_ALLOC_TRACE -rdynamic" all

# The fault-injection suite (tests/chaos/), each workload CHAOS_SECONDS long;
# `make test` runs the same scenarios for a few seconds each.
CHAOS_SECONDS ?= 60
chaos: deps
	@$(MAKE) --no-print-directory all
	@CHAOS_SECONDS=$(CHAOS_SECONDS) EMBER_BUILD=$(BUILD) tests/scripts/chaos.sh
	@echo "== cluster_nemesis with a baseline"
	@CHAOS_BASELINE=1 CHAOS_SECONDS=$(CHAOS_SECONDS) EMBER_BUILD=$(BUILD) tests/chaos/cluster_nemesis.sh
	@SIM_SEEDS=20000 EMBER_BUILD=$(BUILD) tests/scripts/sim.sh

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
	sed 's|/usr/local|$(PREFIX)|g' packaging/ember@.service \
	  > $(DESTDIR)$(PREFIX)/lib/systemd/system/ember@.service
	install -m 644 packaging/emberd.ini packaging/ember-node.ini docs/operations.md \
	  $(DESTDIR)$(PREFIX)/share/doc/ember/

clean:
	rm -rf build

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
