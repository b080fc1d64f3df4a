# The two quick-start commands of the README: `make perf` and `make test`.
# Each installs what it needs first (torch 2.13 CPU build, executorch 1.5.1, this plugin).
PYTHON ?= python3
PIP := $(PYTHON) -m pip
# Debian packages for the linux-aarch64 runner and its tests under emulation, and the
# headless browser that checks the HTML report (tests/report/test_report_browser.py), and valgrind
# for the deterministic instruction metric (--sme2-metric=instructions).
# clang and lld cross-build the macOS masking library for its contract test (tests/run/test_macos_contract.py).
# linux-perf samples which kernels run (tests/evidence/test_perf_samples.py).
# llvm-19's assembler encodes SME2, the oracle of tests/evidence/test_instruction_classes.py (binutils 2.40 cannot).
SYSTEM_PACKAGES := g++-aarch64-linux-gnu qemu-user chromium valgrind clang lld linux-perf llvm-19

.PHONY: install system-deps emulation auto-target auto-is-emulated perf perf-real bench lint test python-matrix wheel-smoke python-smoke version-matrix

TORCH_PIN := 2.13.0
# A plain index (PyPI) gives Linux x86 torch's CUDA build: several GB of nvidia-* packages pytest-sme2 never
# uses. PyTorch's own instructions get the CPU build from their index; where the network reaches it:
#   make install TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
# Either way pytest_sme2/system/torch_build.py says which build was installed and its size on disk.
TORCH_INDEX_URL ?=
TORCH_FROM := $(if $(TORCH_INDEX_URL),--index-url $(TORCH_INDEX_URL))
# Nothing to install when this checkout is already installed editable with every requirement met
# (pytest_sme2/system/install_state.py says which check failed otherwise): saves two pip runs, ~20 s.
# pip byte-compiles what it installs one file at a time (about 43 s of a fresh venv's 73 s); instead the
# packages are installed with --no-compile and compiled afterwards on every core: the same 16,892 .pyc files,
# 47.9 s against 57.4 s in all on 2 cores (benchmarks/results/notebook.md, stop 50). torch ships one test file only Python
# 3.12 parses (py312_intrinsics.py), left out; a file that does not compile is said, not fatal: it is compiled,
# and fails alike, when imported.
COMPILE_INSTALLED := $(PYTHON) -c "import compileall, re, sysconfig; \
	folders = sorted({sysconfig.get_paths()[k] for k in ('purelib', 'platlib')}); \
	ok = all([compileall.compile_dir(f, quiet=1, workers=0, rx=re.compile('py312_intrinsics')) for f in folders]); \
	ok or print('note: some installed files did not byte-compile (above); they are compiled when imported')"
install:
	@if $(PYTHON) pytest_sme2/system/install_state.py --torch $(TORCH_PIN) --extra test; then :; else \
		$(PIP) install --quiet --no-compile $(TORCH_FROM) "torch==$(TORCH_PIN)" \
		&& $(PYTHON) pytest_sme2/system/torch_build.py --torch $(TORCH_PIN) \
		&& $(PIP) install --quiet --no-compile -e ".[test]" \
		&& $(COMPILE_INSTALLED); fi

# As root with apt: install what is missing. Otherwise say what to install;
# the tests that need it are skipped with the same advice.
system-deps:
	@missing=""; \
	command -v aarch64-linux-gnu-g++ >/dev/null || missing="$$missing g++-aarch64-linux-gnu"; \
	command -v qemu-aarch64 >/dev/null || missing="$$missing qemu-user"; \
	command -v chromium >/dev/null || missing="$$missing chromium"; \
	command -v valgrind >/dev/null || missing="$$missing valgrind"; \
	command -v clang >/dev/null || missing="$$missing clang"; \
	command -v ld64.lld >/dev/null || ls /usr/bin/ld64.lld* >/dev/null 2>&1 || missing="$$missing lld"; \
	command -v perf >/dev/null || missing="$$missing linux-perf"; \
	command -v llvm-mc-19 >/dev/null || missing="$$missing llvm-19"; \
	if [ -z "$$missing" ]; then exit 0; fi; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	else \
		echo "note: aarch64 runner, report browser, instruction metric, kernel sampling and instruction class tests will be skipped; to run them: sudo apt-get install$$missing"; \
	fi

# The emulated SME2 target: qemu-user 11.1 fetched from Debian's archive without root and
# without touching apt's sources, the aarch64 executorch wheel and the aarch64 runner.
# As root it also installs the cross compiler, and a failure stops here; otherwise it says
# what is missing and the SME2 on/off tests skip with the same advice.
SETUP_EMULATION := $(PYTHON) -c "import sys; from pytest_sme2.cli import main; sys.exit(main(['setup-emulation']))"
EMULATION_STEP = if [ "$$(id -u)" = 0 ]; then $(SETUP_EMULATION); \
	else $(SETUP_EMULATION) || echo "note: the emulated SME2 target is not set up (see above); SME2 on/off tests will skip"; fi
emulation: install
	@$(EMULATION_STEP)

# What the default target (auto) uses here (pytest_sme2/run/targets/auto.py): on a CPU with SME2 the
# native runner and the SME2-masking library, built with this machine's C/C++ compiler and CMake
# (the PyPI cmake package comes with the plugin); on a CPU without SME2 the emulated target.
HAS_SME2 := $(PYTHON) -c "import sys; from pytest_sme2.run.cpu import host_cpu; sys.exit(0 if host_cpu().has_sme2 else 1)"
BUILD_RUNNER := $(PYTHON) -c "import sys; from pytest_sme2.cli import main; sys.exit(main(['build-runner']))"
auto-target: install
	@if $(HAS_SME2); then \
		$(BUILD_RUNNER) || echo "note: the native runner did not build (see above); pytest-sme2 doctor says what the default target can run"; \
	else $(EMULATION_STEP); fi

# On the emulated target (what auto picks on a CPU without SME2 once it is set up) the perf suite runs in
# pytest-xdist workers, one per core up to 4 (its 22 tests: more gain little, and each worker holds torch):
# counted instructions do not depend on what else runs, and it took 669 s in one process, 267 s in two on a
# 2-core machine (benchmarks/results/notebook.md, "Fast feedback"). On an SME2 CPU (or on the host target, where the emulated one is not
# set up) the tests time real runs, which workers running beside each other would disturb: one process.
# With workers, each one's torch keeps to one thread (OMP_NUM_THREADS=1): torch starts an intra-op thread per
# core in every process, so two workers exporting at once ran four threads on two cores; one cold suite took
# 188.0 s against 194.8 s, its exports 186.5 s of work against 197.9 s; CI 908 s against 926 s, make test's pytest
# 632 s against 648 s (one run each, 2026-11-29: benchmarks/results/notebook.md).
AUTO_IS_EMULATED := $(PYTHON) -c "import sys; from pytest_sme2.run.targets.auto import current_plan; sys.exit(0 if current_plan().target == 'emulated' else 1)"
# The environment of pytest's xdist workers (make perf on the emulated target, make test).
WORKER_ENV := OMP_NUM_THREADS=1
# Exit 0 when the default target is the emulated one: .ci/run asks, to run checks beside make perf only there.
auto-is-emulated:
	@$(AUTO_IS_EMULATED)
PERF_WORKERS ?= $(shell n=$$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 1); [ "$$n" -gt 4 ] && n=4; echo $$n)
# PYTEST_ARGS: more pytest options for the perf suite (docs/ci.md's CI workflow passes --sme2-history).
PYTEST_ARGS ?=
perf: install auto-target
	@if $(AUTO_IS_EMULATED); then workers="-n $(PERF_WORKERS)"; threads="$(WORKER_ENV) "; \
		else workers=""; threads=""; fi; \
		echo "$${threads}$(PYTHON) -m pytest perf_tests/ -m sme2 $$workers $(PYTEST_ARGS)"; \
		env $${threads}$(PYTHON) -m pytest perf_tests/ -m sme2 $$workers $(PYTEST_ARGS)

# The real models at the size they ship (perf tests marked real_size, deselected by make perf): EfficientSAM at
# 1024x1024 (about 208 GFLOP a prediction). Under emulation this takes far longer than make perf; its figures and
# how time grows with a model's work: docs/performance.md, "Real models".
perf-real: install auto-target
	@if $(AUTO_IS_EMULATED); then threads="$(WORKER_ENV) "; else threads=""; fi; \
		echo "$${threads}$(PYTHON) -m pytest perf_tests/ -m 'sme2 and real_size' --real-size $(PYTEST_ARGS)"; \
		env $${threads}$(PYTHON) -m pytest perf_tests/ -m 'sme2 and real_size' --real-size $(PYTEST_ARGS)

# The reproducible benchmarks of pytest-sme2 itself (benchmarks/README.md: minutes each; the studies of hours are
# not here), each with the flags of its figures on docs/performance.md. A script that writes a file writes it under
# benchmarks/results/NAME_DATE/; the others print their table. Every figure is a time: run it alone (the load
# average is printed first). The longest is the result cache's three perf suites (an estimated 20 minutes). Kernel sampling
# needs Linux perf (`make system-deps`) and is said to be skipped without it. The folders carry the hour too (UTC), so a
# run never overwrites a study's results of the same day (counting_2026-11-29/ holds issue 56's).
BENCH_DATE ?= $(shell date -u +%Y-%m-%d-%H%M)
BENCH_OUT := benchmarks/results
bench: install emulation
	@echo "load average: $$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || uptime) (run benchmarks alone)"
	$(PYTHON) benchmarks/bench_profile_build.py --runs 100 --repeat 7
	$(PYTHON) benchmarks/bench_etdump_overhead.py --rounds 10 --runs 50 --model mobilenet_v3_small
	$(PYTHON) benchmarks/bench_export_cache.py --models toy_cnn,mobilenet_v3_small,transformer_encoder \
		--recipes fp32,int8-static
	$(PYTHON) benchmarks/bench_plugin_overhead.py --tests 8 --model mobilenet_v3_small \
		--out $(BENCH_OUT)/plugin_overhead_$(BENCH_DATE)/mobilenet_8_tests.json
	$(PYTHON) benchmarks/bench_counting.py --model mobilenet_v3_small --modes plain,nochain,exec,logged,pipe,counted \
		--repeat 2 --json $(BENCH_OUT)/counting_$(BENCH_DATE)/mobilenet_v3_small_modes.json
	$(PYTHON) benchmarks/bench_counting.py --model toy_cnn --modes plain,lazy,counted --repeat 2 \
		--json $(BENCH_OUT)/counting_$(BENCH_DATE)/toy_cnn.json
	$(PYTHON) benchmarks/bench_counting.py --model mobilenet_v3_small --modes plain,lazy,counted --repeat 2 \
		--json $(BENCH_OUT)/counting_$(BENCH_DATE)/mobilenet_v3_small.json
	$(PYTHON) benchmarks/bench_counting.py --model transformer_encoder --modes plain,lazy,counted --repeat 2 \
		--json $(BENCH_OUT)/counting_$(BENCH_DATE)/transformer_encoder.json
	@if command -v perf >/dev/null; then \
		for hz in 10000 2000; do \
			echo "$(PYTHON) benchmarks/bench_kernel_sampling.py --rounds 8 --runs 40 --hz $$hz --json ..."; \
			$(PYTHON) benchmarks/bench_kernel_sampling.py --rounds 8 --runs 40 --hz $$hz \
				--json $(BENCH_OUT)/kernel_sampling_$(BENCH_DATE)/mobilenet_fp32_$${hz}hz.json || exit 1; \
		done; \
	else echo "note: kernel sampling skipped: no Linux perf (make system-deps installs linux-perf)"; fi
	$(PYTHON) benchmarks/bench_emulation.py
	@mkdir -p $(BENCH_OUT)/result_cache_$(BENCH_DATE)
	$(PYTHON) benchmarks/bench_result_cache.py --out $(BENCH_OUT)/result_cache_$(BENCH_DATE)/result_cache.json

# ruff (lint and format) and mypy, configured in pyproject.toml; `make test` runs them too, so CI does.
RUFF_CHECK := $(PYTHON) -m ruff check .
RUFF_FORMAT := $(PYTHON) -m ruff format --check .
MYPY := $(PYTHON) -m mypy
lint: install
	$(RUFF_CHECK)
	$(RUFF_FORMAT)
	$(MYPY)

# Two workers, each one's torch on one thread (as for make perf's workers, above). ruff first (a second); mypy
# (14 s of one core from a fresh clone) beside pytest instead of before it, its output printed after the tests' and
# its failure failing make test as a test's would (issue 56: make test and CI within their minutes).
PYTEST_TESTS := $(WORKER_ENV) $(PYTHON) -m pytest tests/ -n 2 --dist loadgroup --durations=30
test: install system-deps emulation
	$(RUFF_CHECK)
	$(RUFF_FORMAT)
	@log=$$(mktemp); $(MYPY) >"$$log" 2>&1 & mypy=$$!; \
		echo "$(PYTEST_TESTS)   (and $(MYPY) beside it)"; \
		status=0; $(PYTEST_TESTS) || status=$$?; \
		typed=0; wait $$mypy || typed=$$?; \
		echo "$(MYPY):"; cat "$$log"; rm -f "$$log"; \
		[ "$$status" = 0 ] || exit "$$status"; exit "$$typed"

# Every Python that requires-python admits (pyenv's or python3.X on PATH) loads the plugin in a pytest session:
# a venv each with the built wheel and the few requirements loading needs, no torch (.ci/python_matrix.py says
# why); about 50 s for four Pythons, PyPI only.
python-matrix:
	$(PYTHON) .ci/python_matrix.py

# The wheel as a user installs it: built from a copy, checked to hold every file of the package, installed with
# torch 2.13.0 and executorch 1.5.1 in a fresh venv in a temp folder, where a project outside the checkout runs
# pytest-sme2 setup-emulation (re-using ~/.cache/pytest-sme2), pytest-sme2 init of a tiny model and the two
# commands init prints: a counted perf test recorded, then gated (.ci/wheel_smoke.py; 2-4 minutes, mostly pip).
wheel-smoke:
	$(PYTHON) .ci/wheel_smoke.py

# Before a release, and whenever the Python range or a dependency changes (not in CI): the wheel smoke session on
# every Python requires-python admits. Each venv downloads that Python's own torch 2.13.0 (PyPI's Linux x86 build
# for Pythons other than 3.11 here is CUDA's, about 3 GB: TORCH_INDEX_URL as for `make install` avoids it).
python-smoke:
	$(PYTHON) .ci/python_matrix.py --smoke

# Before a release, and whenever the executorch or torch range changes (not in CI): each tested pair
# (pytest_sme2/system/version_pairs.py) in a fresh venv with the built wheel, then the smoke session in a project
# outside the checkout: an export, a counted run on the emulated target, a gated verdict against the committed
# baselines and an LLM prefill and decode (.ci/version_matrix.py; minutes per pair). TORCH_INDEX_URL as for
# `make install` keeps torch's CPU build.
version-matrix:
	$(PYTHON) .ci/version_matrix.py
