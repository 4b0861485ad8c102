# Thin wrapper over CMake. `make run` and `make test` install what is missing (as root, with apt-get),
# configure, build, then run the default sweep / the whole test suite.
BUILD ?= build
BUILD_TYPE ?= RelWithDebInfo
CMAKE_FLAGS ?=
JOBS ?= $(shell nproc 2>/dev/null || echo 2)

# Debian packages the build, tests and benchmark need: cmake, a C compiler, pkg-config, hwloc, Criterion;
# gnuplot (the sweep's plot) and StarPU 1.3 (the sweep's peer baseline);
# g++, the host compiler nvcc needs for the GPU benchmark's kernel when the CUDA toolkit is there;
# dpkg-dev (dpkg-source unpacks jemalloc's source package), python3 (the ctypes embedding test),
# python3-venv and python3-dev (the Python package: a fresh venv, CPython's headers for its extension);
# liburing-dev (file reads through io_uring) and fio (the device's own figure in the file benchmark).
DEB_PACKAGES := cmake make gcc g++ pkg-config libhwloc-dev libcriterion-dev gnuplot-nox libstarpu-dev \
	dpkg-dev python3 python3-venv python3-dev liburing-dev fio
# ringfetch's private jemalloc (prefixed, static, no initial-exec TLS: docs/api.md, "Embedding"), built once
# from Debian's jemalloc source package by cmake/jemalloc.sh. Outside the build trees: `make clean` keeps
# it, `make distclean` removes it.
JEMALLOC_PREFIX ?= $(CURDIR)/.cache/jemalloc
RESULTS := $(BUILD)/results

.PHONY: all deps configure build run run-hf test pytest sanitize nouring uring-refused tsan valgrind clean distclean

all: build

deps:
	@missing=""; \
	for p in $(DEB_PACKAGES); do \
		dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
		if [ "$$(id -u)" -ne 0 ]; then \
			echo "Missing packages:$$missing. As root, run:"; \
			echo "  apt-get update && apt-get install -y$$missing"; \
			exit 1; \
		fi; \
		echo "Installing:$$missing"; \
		DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null || exit 1; \
	fi
	@bash cmake/jemalloc.sh $(JEMALLOC_PREFIX)

configure: deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) -DRINGFETCH_WERROR=ON \
		-DRINGFETCH_JEMALLOC_ROOT=$(JEMALLOC_PREFIX) $(CMAKE_FLAGS)

build: configure
	cmake --build $(BUILD) -j $(JOBS)

# The default sweep: depth 1,2,3,4,8 x block size 64K..4M on the default backend, against the sequential
# ring, a hand-written two-thread ring and StarPU. Then the arithmetic-bound compute (dsum: the floats
# summed as doubles, one dependency chain), where a ring is hardest to win, with both localities
# (docs/PERFORMANCE.md). Then the serving benchmark (docs/serving.md): a MoE
# decode loop, 32 layers x 8 experts of 512 KiB, top-2, on threads, against sequential, direct and a
# spinning hand-written ring. Then the file benchmarks (docs/files.md): a 512 MiB file streamed cold at
# 64K, 1M and 4M blocks (mmap, pread, a hand io_uring loop, the reader, ringfetch, fio), and the decode
# loop with 16 x 8 experts of 2 MiB in a file served within a 112 MiB memory cgroup.
run: build
	@mkdir -p $(RESULTS)
	$(BUILD)/bench/ringfetch-bench --json $(RESULTS)/sweep.json --csv $(RESULTS)/sweep.csv \
		--plot $(RESULTS)/sweep.png --trace $(RESULTS)/trace.json --dot $(RESULTS)/graph.dot
	@echo
	$(BUILD)/bench/ringfetch-bench --compute dsum --depth 1,2,3,4 --size 64K,1M --locality caller,copier \
		--json $(RESULTS)/sweep-dsum.json --csv $(RESULTS)/sweep-dsum.csv
	@echo
	$(BUILD)/bench/ringfetch-serve-bench --json $(RESULTS)/serving.json --csv $(RESULTS)/serving.csv \
		--plot $(RESULTS)/serving.png
	@echo
	$(BUILD)/bench/ringfetch-file-bench --file $(RESULTS)/file-bench.dat --file-size 512M --size 64K,1M,4M \
		--json $(RESULTS)/file.json
	@echo
	$(BUILD)/bench/ringfetch-serve-file-bench --file $(RESULTS)/serve-file.dat --reps 2 --json $(RESULTS)/serve-file.json
	@echo
	@echo "Results in $(RESULTS)/: sweep.json, sweep.csv, sweep.png (efficiency per depth), trace.json (Perfetto), graph.dot;"
	@echo "sweep-dsum.json, sweep-dsum.csv (the arithmetic-bound compute, computes on the caller and where copied);"
	@echo "serving.json, serving.csv, serving.png (MoE decode loop: time per step per contestant);"
	@echo "file.json (a file streamed cold from disk), serve-file.json (the decode loop served from a file over budget)"

# The transformers benchmark (docs/transformers.md): a Mixtral and a Qwen3-MoE checkpoint of 1.6 GiB (made
# on first use, kept in $(RESULTS)/hf) decoded in a memory cgroup by ringfetch.transformers, mmap views,
# accelerate's disk offload and the whole model in memory (bench/hf/run.py). Its own venv, kept between
# runs: the [transformers] extra and accelerate from PyPI the first time, ringfetch reinstalled from this
# tree with `pip install .` every time (the extension's build in $(BUILD)/python, jemalloc as above).
# HF_ARGS: options of bench/hf/run.py (`make run-hf HF_ARGS=--quick`: a smoke check of about a minute).
HFVENV ?= $(BUILD)/hfvenv
HF_ARGS ?=
run-hf: deps
	test -x $(HFVENV)/bin/python || python3 -m venv $(HFVENV)
	$(HFVENV)/bin/pip install -q --disable-pip-version-check ".[transformers]" accelerate \
		-C build-dir=$(abspath $(BUILD))/python -C cmake.define.RINGFETCH_JEMALLOC_ROOT=$(JEMALLOC_PREFIX)
	@mkdir -p $(RESULTS)
	$(HFVENV)/bin/python bench/hf/run.py --out $(RESULTS)/hf $(HF_ARGS)

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)
	$(if $(PYTEST),$(MAKE) pytest)

# The Python package as a user gets it: `pip install .` into a fresh venv (PyPI brings scikit-build-core,
# and numpy, pytest and safetensors for the suite; torch and transformers, the [transformers] extra, for
# ringfetch.transformers), then its pytest suite, tests/python. The venv is kept between runs (its
# dependencies are fetched once; ringfetch itself pip reinstalls from this tree every time), and so is the
# extension's CMake build in $(BUILD)/python; jemalloc is the one above. A clean clone starts fresh.
PYTEST ?= 1
PYVENV ?= $(BUILD)/pyvenv
pytest: deps
	test -x $(PYVENV)/bin/python || python3 -m venv $(PYVENV)
	$(PYVENV)/bin/pip install -q --disable-pip-version-check ".[test,transformers]" -C build-dir=$(abspath $(BUILD))/python \
		-C cmake.define.RINGFETCH_JEMALLOC_ROOT=$(JEMALLOC_PREFIX)
	$(PYVENV)/bin/python -m pytest -q -p no:cacheprovider tests/python

# The suite again under AddressSanitizer + UndefinedBehaviorSanitizer.
sanitize: deps
	LSAN_OPTIONS="suppressions=$(CURDIR)/tests/lsan.supp$${LSAN_OPTIONS:+:$$LSAN_OPTIONS}" \
	$(MAKE) test BUILD=$(BUILD)-asan BUILD_TYPE=Debug PYTEST= CMAKE_FLAGS="-DRINGFETCH_SANITIZE=address,undefined $(CMAKE_FLAGS)"

# The file tests in a build without liburing: every file read is a pread, as where io_uring is refused
# (a container's seccomp profile, an old kernel), on every backend.
NOURING_TESTS := test_file test_reader test_files test_keyed test_noalloc test_keyed_noalloc test_cuda_files race_reader race_files \
	ringfetch-file-bench ringfetch-serve-file-bench
nouring: deps
	cmake -S . -B $(BUILD)-nouring -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) -DRINGFETCH_WERROR=ON -DRINGFETCH_IO_URING=OFF \
		-DRINGFETCH_JEMALLOC_ROOT=$(JEMALLOC_PREFIX) $(CMAKE_FLAGS)
	cmake --build $(BUILD)-nouring -j $(JOBS) --target $(NOURING_TESTS)
	cd $(BUILD)-nouring && ctest --output-on-failure -j $(JOBS) \
		-R '^(file|reader|files_.*|keyed_(cpu|threads)|noalloc_.*|keyed_noalloc_.*|cuda_files|race_reader|race_files|file_bench_smoke)$$'

# The same file tests, and the Python package's file, keyed, safetensors and transformers tests, in the
# normal build with io_uring_setup refused at run time by a seccomp filter (tests/no_io_uring.c), as
# Docker's default profile refuses it: the readers find out and fall back to pread as they would there.
# After `make test` (its build, and its venv for the Python half).
REFUSED_PYTESTS := tests/python/test_files.py tests/python/test_keyed.py tests/python/test_safetensors.py \
	tests/python/test_file_shrink.py tests/python/test_transformers.py
uring-refused: build
	@if ! $(BUILD)/tests/no_io_uring true; then echo "SKIPPED: io_uring cannot be refused here (no seccomp filter)"; else \
		set -e; \
		(cd $(BUILD) && tests/no_io_uring ctest --output-on-failure -j $(JOBS) \
			-R '^(file|reader|files_.*|keyed_(cpu|threads)|noalloc_.*|keyed_noalloc_.*|race_reader|race_files|file_bench_smoke|memory_cgroup)$$'); \
		if [ -x $(PYVENV)/bin/python ]; then $(BUILD)/tests/no_io_uring $(PYVENV)/bin/python -m pytest -q \
			-p no:cacheprovider $(REFUSED_PYTESTS); fi; \
	fi

# The race and stress tests (label tsan) under ThreadSanitizer. Criterion cannot run under TSan, so the
# threaded checks live in plain programs: tests/race.c, race_copy.c, race_keyed.c, race_control.c,
# race_cuda.c (the cuda backend's staging threads, against the simulated CUDA), race_reader.c (the file
# reader, its doorbell rung from another thread), race_files.c, race_experts.c and unload.c.
tsan: deps
	cmake -S . -B $(BUILD)-tsan -DCMAKE_BUILD_TYPE=Debug -DRINGFETCH_WERROR=ON -DRINGFETCH_SANITIZE=thread $(CMAKE_FLAGS)
	cmake --build $(BUILD)-tsan -j $(JOBS) --target test_race race_copy race_cuda test_race_keyed test_race_control \
		race_reader race_files race_experts test_unload no_io_uring
	cd $(BUILD)-tsan && TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" ctest --output-on-failure -j $(JOBS) -L tsan
	@# the file races again with io_uring refused: a run's copies are the lanes' preads there
	if $(BUILD)-tsan/tests/no_io_uring true; then cd $(BUILD)-tsan && TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" \
		tests/no_io_uring ctest --output-on-failure -j $(JOBS) -R '^(race_reader|race_files|race_experts.*)$$'; fi

# A valgrind memcheck pass over a subset: the seeded stress on both CPU backends, the demo and a tiny
# sweep (plain programs, so a memcheck error or a definite leak fails the target through its exit code).
# jemalloc is private and static inside libringfetch (it serves only the staging arenas, from mmap'ed
# memory): malloc is libc's, which memcheck replaces as usual. valgrind runs one thread at a time;
# --fair-sched hands the lock round in turn, so a thread that spins waiting for another (the wait
# policy's spin) does not keep it from running (without it one keyed stress iteration took minutes).
VALGRIND := valgrind -q --fair-sched=yes --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite
valgrind: build
	@command -v valgrind >/dev/null || $(MAKE) deps DEB_PACKAGES="$(DEB_PACKAGES) valgrind"
	$(VALGRIND) $(BUILD)/tests/test_race --backend cpu --iterations 300 --seed 1
	$(VALGRIND) $(BUILD)/tests/test_race --backend threads --iterations 150 --seed 1
	$(VALGRIND) $(BUILD)/tests/test_race_keyed --backend cpu --iterations 40 --seed 1
	$(VALGRIND) $(BUILD)/tests/test_race_keyed --backend threads --iterations 20 --seed 1
	$(VALGRIND) $(BUILD)/bench/ringfetch-demo --blocks 64 --size 65536
	$(VALGRIND) $(BUILD)/bench/ringfetch-bench --backend cpu,threads --depth 1,2,auto --size 4K,64K --blocks 32 \
		--reps 1 --baselines sequential,hand --quiet

clean:
	rm -rf $(BUILD) $(BUILD)-asan $(BUILD)-tsan $(BUILD)-nouring

distclean: clean
	rm -rf $(JEMALLOC_PREFIX) $(JEMALLOC_PREFIX).src

# libFuzzer targets (tests/fuzz/): a clang build with ASan + UBSan in $(FUZZ_BUILD), then each fuzzer run
# deterministically (-seed=1) for a fixed number of inputs from a scratch copy of its seed corpus. Fails
# on any crash, sanitizer report, leak or timeout. clang and its runtime are needed for this target only.
FUZZ_BUILD ?= build-fuzz
FUZZ_CC ?= clang
FUZZ_PACKAGES := clang libclang-rt-14-dev
FUZZ_GRAPH_RUNS ?= 150000
FUZZ_CONFIG_RUNS ?= 150000

.PHONY: deps-fuzz fuzz

deps-fuzz:
	$(MAKE) deps DEB_PACKAGES="$(DEB_PACKAGES) $(FUZZ_PACKAGES)"

fuzz: deps-fuzz
	cmake -S . -B $(FUZZ_BUILD) -DCMAKE_C_COMPILER=$(FUZZ_CC) -DCMAKE_BUILD_TYPE=RelWithDebInfo \
		-DRINGFETCH_WERROR=ON -DRINGFETCH_FUZZ=ON -DRINGFETCH_SANITIZE=address,undefined \
		-DRINGFETCH_BENCH=ON $(CMAKE_FLAGS)
	cmake --build $(FUZZ_BUILD) -j $(JOBS) --target fuzz_graph fuzz_config
	bash tests/fuzz/run.sh $(FUZZ_BUILD)/tests/fuzz $(FUZZ_GRAPH_RUNS) $(FUZZ_CONFIG_RUNS)
