# Thin wrapper over Meson: `make run` and `make test` are the contract with a new user.
BUILD      ?= build
ASAN_BUILD ?= build-asan
FUZZ_BUILD ?= build-fuzz
CONFIG     ?= examples/quickstart.toml
PREFIX     ?= /usr/local
FUZZ_TIME  ?= 60
SIM_FIRST  ?= 1
SIM_SEEDS  ?= 1000
SIM_STEPS  ?= 5000

.PHONY: all deps deps-test deps-bench build run install test test-asan fuzz docs bench sim clean

all: build

# Three package sets (scripts/deps.sh): what building and running need,
# then the test tools and interop peers, then the bench's peers. The peers
# are never left enabled as system services.
deps:
	@scripts/deps.sh run

deps-test:
	@scripts/deps.sh test

deps-bench:
	@scripts/deps.sh bench

$(BUILD)/build.ninja:
	meson setup $(BUILD)

build: deps $(BUILD)/build.ninja
	meson compile -C $(BUILD)

run: build
	$(BUILD)/src/etemenanki-app -c $(CONFIG)

# The binary, the man page, /etc/etemenanki/config.toml (with PREFIX=/usr;
# PREFIX/etc otherwise) and etemenanki.service (docs/install.md). DESTDIR
# is honoured, as meson install does. The build folder is configured for
# PREFIX first, so a second install with another PREFIX moves it.
install: build
	meson configure $(BUILD) -Dprefix=$(PREFIX)
	meson install -C $(BUILD)

# Everything: unit, corpus and end-to-end tests, then the unit and
# end-to-end tests again with the binary under AddressSanitizer and UBSan.
test: deps-test build
	meson test -C $(BUILD) --print-errorlogs
	$(MAKE) --no-print-directory test-asan

$(ASAN_BUILD)/build.ninja:
	meson setup $(ASAN_BUILD) -Db_sanitize=address,undefined -Db_lundef=false -Dbuildtype=debug

test-asan: deps-test $(ASAN_BUILD)/build.ninja
	meson compile -C $(ASAN_BUILD)
	ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
		meson test -C $(ASAN_BUILD) --print-errorlogs --suite unit --suite toml --suite e2e

$(FUZZ_BUILD)/build.ninja:
	CC=clang meson setup $(FUZZ_BUILD) -Dfuzz=true -Db_lundef=false

# Runs every libFuzzer target for FUZZ_TIME seconds each. The corpus grows
# under the build folder; tests/fuzz/seeds/<target> is only read. Then the
# per-inbound bad-input suite (tests/e2e/test_adversarial.py) with
# ADVERSARIAL_CASES cases a group (make test runs 24) against the ASan build.
ADVERSARIAL_CASES ?= 480
fuzz: deps-test $(FUZZ_BUILD)/build.ninja $(ASAN_BUILD)/build.ninja
	meson compile -C $(FUZZ_BUILD)
	meson compile -C $(ASAN_BUILD)
	@for t in $(FUZZ_BUILD)/tests/fuzz/fuzz_*; do \
		[ -x "$$t" ] && [ -f "$$t" ] || continue; \
		name=$$(basename $$t); name=$${name#fuzz_}; \
		echo "fuzz: $$name for $(FUZZ_TIME)s"; \
		mkdir -p $(FUZZ_BUILD)/corpus/$$name; \
		seeds=tests/fuzz/seeds/$$name; [ -d $$seeds ] || seeds=; \
		$$t -max_total_time=$(FUZZ_TIME) -max_len=8192 $(FUZZ_BUILD)/corpus/$$name $$seeds || exit 1; \
	done
	ETM_ADVERSARIAL_CASES=$(ADVERSARIAL_CASES) ETM_APP=$(ASAN_BUILD)/src/etemenanki-app \
		ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
		/usr/bin/python3 -m pytest -q -p no:cacheprovider tests/e2e/test_adversarial.py

# Side by side against real peers on loopback (docs/performance.md): writes
# bench/results/<date>.md and the generated part of docs/performance.md.
# BENCH_ONLY=key,... runs a subset (bench/run.py names the keys).
bench: deps-bench build
	BUILD=$(BUILD) /usr/bin/python3 bench/run.py

# The UDP load-balancer core's deterministic simulator over many seeds
# (`make test` runs seeds 1-100 at 2000 steps). A failing seed prints the
# command that reproduces it.
sim: build
	$(BUILD)/tests/sim/udplb_sim --steps $(SIM_STEPS) $(SIM_FIRST) $(SIM_SEEDS)

# Rewrites the generated reference section of docs/config.md from the schema.
docs: build
	$(BUILD)/tools/config-reference docs/config.md --write

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(FUZZ_BUILD)
