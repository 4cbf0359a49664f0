# minitrain — one C binary that trains a GPT with 4D parallelism.
#
#   make            build ./minitrain (CPU: OpenBLAS + OpenMP)
#   make deps       install the Debian packages the binary needs (apt-get; needs root)
#   make test-deps  deps + the packages only the tests need (cmocka, PyTorch, curl, wrk, redis,
#                   node + npm)
#   make demo       deps + build + prepare Shakespeare + train examples/shakespeare.ini + sample
#   make test       test-deps + build + every test (unit, reference, end-to-end, guard, no-MPI, asan)
#   make test T=ckpt  one area: tests/run_ckpt.sh and the area's unit tests (UNITS_ckpt below)
#   make test-quick the unit tests, the layering check, the map, run_e2e and run_ckpt (minutes)
#   make guard      rerun the end-to-end scripts of GUARD_TESTS on the guard device (docs/gpu.md)
#   make asan       build with AddressSanitizer/UBSan into build-asan/ and run the unit tests
#   make nompi      build without MPI (MPICC=) into build-nompi/ and run the unit tests
#   make GPU=1      build-gpu/minitrain with the CUDA backend (cuBLAS, NCCL; MPICC= for one GPU
#                   without MPI) — see docs/gpu.md
#
# Sources are found by wildcard: one file per concern under the MODULES folders (cmd/: one file per
# subcommand); minitrain.c holds main() and the subcommand table. Every test is tests/test_*.c (cmocka) or
# tests/run_*.sh (end to end).

CC ?= gcc
PYTHON_REF ?= /usr/bin/python3
GPU ?= 0
# The GPU build keeps its objects and its binary apart (build-gpu/minitrain), so `make GPU=1`
# never replaces the CPU build's ./minitrain that the tests run.
ifeq ($(GPU),1)
  BUILD ?= build-gpu
  BIN ?= $(BUILD)/minitrain
else
  BUILD ?= build
  BIN ?= minitrain
endif
ASAN ?= 0

CFLAGS_BASE = -std=gnu11 -O3 -g -march=native -fno-math-errno -fopenmp -Wall -Wextra -Werror -I. -MMD -MP
ifeq ($(ASAN),1)
  CFLAGS_BASE = -std=gnu11 -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined \
                -fopenmp -Wall -Wextra -Werror -I. -MMD -MP
  LDFLAGS_ASAN = -fsanitize=address,undefined
endif
# FUZZ=1: the library built by clang with libFuzzer's coverage instrumentation (see `make fuzz`)
FUZZ ?= 0
ifeq ($(FUZZ),1)
  CC = clang
  CFLAGS_BASE = -std=gnu11 -O1 -g -fno-omit-frame-pointer -fsanitize=fuzzer-no-link,address,undefined \
                -fopenmp -Wall -Wextra -Werror -Wno-pass-failed -I. -MMD -MP
  LDFLAGS_ASAN = -fsanitize=address,undefined
endif

# Debian's OpenBLAS 0.3.21 falls back to SSE3 kernels on CPUs it does not know (Sapphire Rapids):
# tests and benchmarks run with the kernels the ISA supports (./minitrain re-execs itself the same
# way, see minitrain.c). A value already in the environment wins.
ifeq ($(origin OPENBLAS_CORETYPE),undefined)
  ifneq ($(shell grep -m1 -ow avx512f /proc/cpuinfo 2>/dev/null),)
    export OPENBLAS_CORETYPE = SkylakeX
  else ifneq ($(shell grep -m1 -ow avx2 /proc/cpuinfo 2>/dev/null),)
    export OPENBLAS_CORETYPE = Haswell
  endif
endif

# --- feature detection (prints ✓/✗) -------------------------------------------------------------
BLAS_INC := $(firstword $(wildcard /usr/include/x86_64-linux-gnu/openblas-openmp /usr/include/aarch64-linux-gnu/openblas-openmp))
BLAS_LIB := $(firstword $(wildcard /usr/lib/x86_64-linux-gnu/openblas-openmp /usr/lib/aarch64-linux-gnu/openblas-openmp))
ifneq ($(BLAS_INC),)
  CFLAGS_BASE += -I$(BLAS_INC)
  LDLIBS += -L$(BLAS_LIB) -Wl,-rpath,$(BLAS_LIB) -lopenblas
  $(info ✓ OpenBLAS (OpenMP build) $(BLAS_LIB))
else
  LDLIBS += -lopenblas
  $(info ✗ OpenBLAS OpenMP build not found; using default -lopenblas (run: make deps))
endif

define have_header
$(shell echo '#include <$(1)>' | $(CC) $(2) -E -x c - >/dev/null 2>&1 && echo 1)
endef
ifeq ($(call have_header,sqlite3.h),1)
  $(info ✓ SQLite)
else
  $(info ✗ SQLite (libsqlite3-dev) — run: make deps)
endif
ifeq ($(call have_header,ini.h),1)
  $(info ✓ inih)
else
  $(info ✗ inih (libinih-dev) — run: make deps)
endif
ifeq ($(call have_header,cjson/cJSON.h),1)
  $(info ✓ cJSON)
else
  $(info ✗ cJSON (libcjson-dev) — run: make deps)
endif
ifeq ($(call have_header,microhttpd.h),1)
  $(info ✓ libmicrohttpd)
else
  $(info ✗ libmicrohttpd (libmicrohttpd-dev) — run: make deps)
endif
ifeq ($(call have_header,curl/curl.h),1)
  $(info ✓ libcurl (gateway upstreams))
else
  $(info ✗ libcurl (libcurl4-openssl-dev) — run: make deps)
endif
ifeq ($(call have_header,pcre2.h,-DPCRE2_CODE_UNIT_WIDTH=8),1)
  $(info ✓ PCRE2 (gateway content rules, GPT-2 pre-tokenizer))
else
  $(info ✗ PCRE2 (libpcre2-dev) — run: make deps)
endif
# API keys are stored as SHA-256 hashes and compared with CRYPTO_memcmp, PII hash tokens are
# HMAC-SHA256 (safety/pii.c): OpenSSL's libcrypto
ifeq ($(call have_header,openssl/sha.h),1)
  $(info ✓ OpenSSL libcrypto (API key hashes, PII keyed hashes))
else
  $(info ✗ OpenSSL libcrypto (libssl-dev) — run: make deps)
endif
# shared rate-limit buckets across gateway replicas live in Redis
ifeq ($(call have_header,hiredis/hiredis.h),1)
  $(info ✓ hiredis)
else
  $(info ✗ hiredis (libhiredis-dev) — run: make deps)
endif
# the team's database (issue 25, db/): libpq ships run.db's rows to PostgreSQL; without it the
# binary builds and --db / `minitrain db` say libpq is missing (db/db_nolibpq.c)
ifeq ($(shell pkg-config --exists libpq 2>/dev/null && echo 1),1)
  $(info ✓ libpq (PostgreSQL: --db, minitrain db))
  CFLAGS_BASE += -DMT_HAVE_LIBPQ $(shell pkg-config --cflags libpq)
  LDLIBS_PQ = $(shell pkg-config --libs libpq)
else
  $(info ✗ libpq (libpq-dev): --db disabled — run: make deps)
endif
ifneq ($(shell command -v redis-server 2>/dev/null),)
  $(info ✓ redis-server (tests))
else
  $(info ✗ redis-server (redis-server, tests only) — run: make test-deps)
endif
ifneq ($(wildcard /usr/sbin/slurmctld),)
  $(info ✓ Slurm + munge (tests: tests/run_slurm.sh's local cluster))
else
  $(info ✗ Slurm (slurm-wlm, munge; tests only) — run: make test-deps)
endif
ifneq ($(shell command -v npm 2>/dev/null),)
  $(info ✓ Node.js + npm (tests: the openai client))
else
  $(info ✗ Node.js + npm (nodejs, npm; tests only) — run: make test-deps)
endif
ifeq ($(call have_header,cmocka.h),1)
  $(info ✓ cmocka (tests))
else
  $(info ✗ cmocka (libcmocka-dev, tests only) — run: make deps)
endif
# `minitrain plan --from-hwloc` reads the local node's topology (packages, NUMA, cores, GPUs)
ifeq ($(call have_header,hwloc.h),1)
  $(info ✓ hwloc (libhwloc-dev))
  CFLAGS_BASE += -DMT_HAVE_HWLOC
  LDLIBS += -lhwloc
else
  $(info ✗ hwloc (libhwloc-dev): plan --from-hwloc disabled — run: make deps)
endif
MPICC := $(shell command -v mpicc 2>/dev/null)
ifneq ($(MPICC),)
  MPI_CFLAGS := $(shell mpicc --showme:compile 2>/dev/null)
  MPI_LIBS := $(shell mpicc --showme:link 2>/dev/null)
  CFLAGS_BASE += -DMT_HAVE_MPI $(MPI_CFLAGS)
  LDLIBS += $(MPI_LIBS)
  $(info ✓ OpenMPI (mpicc))
else
  $(info ✗ OpenMPI (openmpi-bin, libopenmpi-dev): single-process only — run: make deps)
endif
ifeq ($(GPU),1)
  CUDA ?= /usr/local/cuda
  NVCC := $(shell command -v $(CUDA)/bin/nvcc 2>/dev/null)
  ifneq ($(NVCC),)
    $(info ✓ CUDA (nvcc $(NVCC)))
    CFLAGS_BASE += -DMT_HAVE_CUDA -I$(CUDA)/include
    LDLIBS += -L$(CUDA)/lib64 -Wl,-rpath,$(CUDA)/lib64 -lcublasLt -lcublas -lcudart -lnccl -lstdc++
  else
    $(error ✗ GPU=1 but nvcc not found under $(CUDA))
  endif
endif

# The CUDA backend (ops/ops_cuda*.cu, GPU=1 only): machine code for Hopper (sm_90: H100/H200)
# and Ampere (sm_80: A100), plus sm_90 PTX for newer parts. Warnings are errors in nvcc, in the
# host compiler and in ptxas; -warn-spills/-warn-lmem-usage make a register spill or a kernel's
# local-memory use a warning, hence a build failure.
CUDA_ARCHS ?= -gencode arch=compute_90,code=sm_90 -gencode arch=compute_80,code=sm_80 \
              -gencode arch=compute_90,code=compute_90
NVCCFLAGS = -std=c++17 -O3 -I. $(CUDA_ARCHS) -Werror all-warnings \
            -Xcompiler -Wall,-Wextra,-Werror,-fopenmp -Xptxas -warn-spills,-warn-lmem-usage,-Werror \
            -MMD -MP
# ops/ops_cuda_table.c puts the kernels in the backend table (ops/ops_backend.h): compiled in
# GPU=1 builds only, like the kernels themselves.
ifeq ($(GPU),1)
  CU_SRCS = $(wildcard ops/ops_cuda*.cu)
  CUDA_TABLE =
else
  CU_SRCS =
  CUDA_TABLE = ops/ops_cuda_table.c
endif

LDLIBS += $(LDLIBS_PQ) -lsqlite3 -linih -lcjson -lmicrohttpd -lcurl -lpcre2-8 -lcrypto -lhiredis -lpthread -lm
CFLAGS = $(CFLAGS_BASE)

# --- sources ------------------------------------------------------------------------------------
MODULES = core parallel ckpt objstore text db ops model train report dash serve safety gateway sched cmd
SRCS = $(filter-out $(CUDA_TABLE),$(foreach m,$(MODULES),$(wildcard $(m)/*.c)))
OBJS = $(SRCS:%.c=$(BUILD)/%.o) $(CU_SRCS:%.cu=$(BUILD)/%.o)
LIB = $(BUILD)/libminitrain.a
TEST_SRCS = $(wildcard tests/test_*.c)
TEST_BINS = $(TEST_SRCS:tests/%.c=$(BUILD)/tests/%)

# GPU=1 also builds the device check's driver (tests/gpu/run_gpu_checks.sh runs it on a GPU)
ifeq ($(GPU),1)
  GPU_TOOLS = $(BUILD)/tests/gpu/gpu_parity
endif

.PHONY: all deps test-deps demo test test-quick test-area unit guard asan nompi fuzz bench clean js-tiktoken
all: $(BIN) $(GPU_TOOLS)

# V=1 shows full command lines
Q = $(if $(filter 1,$(V)),,@)
$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC   $<")
	$(Q)$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/%.o: %.cu
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  NVCC $<")
	$(Q)$(NVCC) $(NVCCFLAGS) -c $< -o $@

$(LIB): $(OBJS)
	@rm -f $@
	$(Q)ar rcs $@ $^

$(BIN): $(BUILD)/minitrain.o $(LIB)
	@$(if $(Q),echo "  LINK $@")
	$(Q)$(CC) $(CFLAGS) $^ -o $@ $(LDFLAGS_ASAN) $(LDLIBS)

$(BUILD)/tests/%: tests/%.c $(LIB)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  TEST $@")
	$(Q)$(CC) $(CFLAGS) $< $(LIB) -o $@ $(LDFLAGS_ASAN) $(LDLIBS) -lcmocka

$(BUILD)/tests/gpu/%: tests/gpu/%.c $(LIB)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  GPU  $@")
	$(Q)$(CC) $(CFLAGS) $< $(LIB) -o $@ $(LDFLAGS_ASAN) $(LDLIBS)

# --- packages -----------------------------------------------------------------------------------
# What the binary needs (make demo) and what only the tests need (make test): PyTorch alone is
# most of a gigabyte that a newcomer running the demo should not wait for.
# sqlite3 is the command-line client docs/tutorial.md reads run.db with; elfutils gives eu-stack,
# which the supervisor and `minitrain diagnose` take every rank's stack with (sched/stacks.h).
DEB_PKGS = gcc make libopenblas-openmp-dev libsqlite3-dev libinih-dev libcjson-dev \
           libmicrohttpd-dev openmpi-bin libopenmpi-dev libssl-dev libhiredis-dev libhwloc-dev \
           libcurl4-openssl-dev libpcre2-dev sqlite3 elfutils
# libpq-dev: the PostgreSQL client library the shipper and `minitrain db` use (db/, issue 25)
DEB_PKGS += libpq-dev
DEB_TEST_PKGS = libcmocka-dev python3-torch python3-numpy curl wrk redis-server slurm-wlm munge \
                clang libclang-rt-14-dev libomp-14-dev shellcheck chromium
# OpenStack Swift with s3api + tempauth: the real S3 server of the object-store tests (issue 27,
# tests/swift_lib.sh starts a one-box Swift on loopback)
DEB_TEST_PKGS += swift swift-proxy swift-object swift-container swift-account python3-swift
# botocore: an S3 client independent of objstore/s3.c, with which run_object_store.sh creates the
# bucket, flips an archived byte and verifies every archived object (tests/s3_tool.py)
DEB_TEST_PKGS += python3-botocore
# the HA database cluster of issue 25 (tests/pg_ha_lib.sh): 3 etcd, 3 PostgreSQL 15 under Patroni;
# python3-etcd is Patroni's etcd v2 client, the one the tests use (the v3 one of Debian's Patroni
# 3.0.2 can overwrite a leader key: see tests/pg_ha_lib.sh)
DEB_TEST_PKGS += postgresql-15 patroni etcd-server etcd-client python3-etcd
# Node.js and npm (tests drive serve with the `openai` npm package, and run js-tiktoken, the GPT-2
# tokenizer tests' reference) are checked by command:
# NodeSource's nodejs package provides npm without Debian's npm package being installed.
DEB_TEST_CMDS = node:nodejs npm:npm
# $(call install_missing,PACKAGES,WHAT[,COMMAND:PACKAGE ...]): apt-get install those not installed yet
define install_missing
	@missing=""; for p in $(1); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	for cp in $(3); do command -v $${cp%%:*} >/dev/null 2>&1 || missing="$$missing $${cp#*:}"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  if [ "$$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing; \
	else echo "✓ all Debian packages present ($(2))"; fi
endef
deps:
	$(call install_missing,$(DEB_PKGS),build and run)
test-deps:
	$(call install_missing,$(DEB_PKGS) $(DEB_TEST_PKGS),build and tests,$(DEB_TEST_CMDS))

# js-tiktoken (npm registry, MIT licence): the independent reference of the GPT-2 tokenizer tests,
# installed into $(BUILD)/node on first use (never committed; the GPT-2 ranks are written from it at
# test time, see docs/interop.md).
JS_TIKTOKEN_VERSION = 1.0.21
JS_TIKTOKEN = $(BUILD)/node/node_modules/js-tiktoken/package.json
$(JS_TIKTOKEN):
	@mkdir -p $(BUILD)/node
	cd $(BUILD)/node && npm install --no-audit --no-fund --loglevel=error js-tiktoken@$(JS_TIKTOKEN_VERSION)
js-tiktoken: $(JS_TIKTOKEN)

# --- user entry points --------------------------------------------------------------------------
demo: deps
	$(MAKE) minitrain
	./minitrain prepare --input examples/data/tinyshakespeare.txt --out examples/data/shakespeare_byte
	./minitrain train --config examples/shakespeare.ini
	./minitrain sample --run runs/shakespeare --prompt "ROMEO:" --max-tokens 300

unit: $(TEST_BINS)
	@set -e; for t in $(TEST_BINS); do echo "== $$t"; $$t; done

# $(call run_scripts,SCRIPTS): each end-to-end script in turn, its wall time after it (the lines
# tests/README.md's durations are read from); the first failure stops the loop
define run_scripts
	@set -e; for s in $(1); do echo "== $$s"; t0=$$(date +%s); bash $$s; \
	  echo "== $$s: $$(( $$(date +%s) - t0 )) s"; done
endef

ifeq ($(T),)
test: test-deps
	$(MAKE) minitrain
	$(MAKE) unit
	$(call run_scripts,$(wildcard tests/run_*.sh))
	$(MAKE) guard
	@echo "== a build without MPI (make nompi): -Werror, single-process unit tests"
	$(MAKE) nompi
	@echo "== sanitizers (make asan): unit tests and the HTTP server under ASan/UBSan"
	$(MAKE) asan
	@echo "== fuzzing (make fuzz): every harness for $(FUZZ_SECONDS) s"
	$(MAKE) fuzz
	@echo "all tests passed"
else
test: test-area
endif

# --- one area, a quick subset ---------------------------------------------------------------------
# make test T=NAME: tests/run_NAME.sh (when there is one) and the unit tests of that area, UNITS_NAME
# (default: every tests/test_NAME*.c). No package installs: run `make test-deps` once first.
UNITS_ckpt = test_ckpt_bulkio test_ckpt_commit test_ckpt_peer test_ckpt_writer \
             test_checkpoint_trainer test_reshard test_safetensors
UNITS_peer_ckpt = test_ckpt_peer test_peer_topology
UNITS_e2e = test_config test_args test_data test_tokenizer test_optim test_sample test_rundb
UNITS_bad_inputs = test_config test_args
UNITS_parallel = test_parallel_units test_reference test_perf_step
UNITS_pipeline = test_parallel_units
UNITS_moe_ep = test_moe
UNITS_dashboard = test_dash test_report_svg
UNITS_moe_train = test_moe
UNITS_guard = test_guard
UNITS_serve = test_serve test_serve_chat test_decode_batch
UNITS_openai = test_serve_chat
UNITS_gateway = test_gw_proxy test_gw_keys test_gw_limit
UNITS_gw_redis = test_gw_limit
UNITS_resilience = test_sched test_runlock
UNITS_reliability = test_sched test_runlock
UNITS_chaos = test_sched
UNITS_sdc = test_sdc test_sched
UNITS_events = test_events test_rundb
# issue 30: the stable peak and its cache, the decode matmul, decode equality, ETTR with overlap_ms
UNITS_peak = test_flops test_ops_gemv test_decode_batch test_sched
UNITS_plan = test_plan test_replan test_peer_topology
UNITS_slurm = test_replan
UNITS_interop = test_interop test_safetensors
UNITS_tokenizer_gpt2 = test_tokenizer test_interop
UNITS_report_html = test_report_svg test_rundb
UNITS_pii = test_pii
UNITS_robust = test_robust
UNITS_gpu_script = test_ops_cuda_launch
UNITS_object_store = test_objstore
UNITS_db = test_db_meta test_rundb
UNITS_db_ha =
UNITS_layers =
UNITS_map =
UNITS_tutorial =
AREA_UNITS = $(if $(filter undefined,$(origin UNITS_$(T))), \
               $(patsubst tests/%.c,%,$(wildcard tests/test_$(T)*.c)),$(UNITS_$(T)))
AREA_SCRIPT = $(wildcard tests/run_$(T).sh)
test-area:
	@[ -n "$(AREA_SCRIPT)$(strip $(AREA_UNITS))" ] || { echo "make test T=$(T): no tests/run_$(T).sh and no \
	unit tests for it; areas: $(patsubst tests/run_%.sh,%,$(wildcard tests/run_*.sh))"; exit 2; }
	$(MAKE) minitrain $(AREA_UNITS:%=$(BUILD)/tests/%)
	@set -e; for t in $(AREA_UNITS:%=$(BUILD)/tests/%); do echo "== $$t"; $$t; done
	$(call run_scripts,$(AREA_SCRIPT))
	@echo "area $(T): passed"

QUICK_SCRIPTS = tests/run_layers.sh tests/run_map.sh tests/run_e2e.sh tests/run_ckpt.sh
test-quick:
	$(MAKE) minitrain
	$(MAKE) unit
	$(call run_scripts,$(QUICK_SCRIPTS))
	@echo "quick tests passed (the whole suite: make test)"

# The guard device (docs/gpu.md): these end-to-end scripts again with every model buffer PROT_NONE
# outside the ops (MINITRAIN_DEVICE=guard overrides each run's device). Every layout is compared
# bit for bit with cpu by tests/run_guard.sh in the loop above; these add checkpoint resume (own
# and peer tiers), resilience (fault injection, restarts), sample, serve and expert parallelism.
GUARD_TESTS ?= tests/run_e2e.sh tests/run_ckpt.sh tests/run_peer_ckpt.sh tests/run_resilience.sh \
               tests/run_serve.sh tests/run_moe_ep.sh
guard:
	@set -e; for s in $(GUARD_TESTS); do echo "== guard: $$s"; MINITRAIN_DEVICE=guard bash $$s; done

asan:
	$(MAKE) ASAN=1 BUILD=build-asan build-asan/libminitrain.a
	$(MAKE) ASAN=1 BUILD=build-asan $(TEST_SRCS:tests/%.c=build-asan/tests/%)
	@set -e; for t in $(TEST_SRCS:tests/%.c=build-asan/tests/%); do echo "== $$t"; $$t; done
	# issue #7: the HTTP server's end-to-end + wrk load test under AddressSanitizer/UBSan, with an
	# ASan build of the binary (BIN keeps it apart from ./minitrain)
	$(MAKE) ASAN=1 BUILD=build-asan BIN=build-asan/minitrain build-asan/minitrain
	MT=build-asan/minitrain bash tests/run_serve.sh
	# issue #11 finding 8: bad input exits 2 under the sanitizers too (no leak report turning it into 1)
	MT=build-asan/minitrain bash tests/asan_exits.sh

# A machine image without MPI (a GPU node may have only NCCL) must build under -Werror and pass
# the single-process tests: MPICC= turns the MPI backend off (parallel/comm.c's self backend).
NOMPI_TESTS = $(TEST_SRCS:tests/%.c=build-nompi/tests/%)
nompi:
	$(MAKE) MPICC= BUILD=build-nompi BIN=build-nompi/minitrain build-nompi/minitrain $(NOMPI_TESTS)
	@set -e; for t in $(NOMPI_TESTS); do echo "== $$t"; $$t; done


# --- fuzzing (libFuzzer; tests/fuzz/README.md) ------------------------------------------------
# make fuzz FUZZ_SECONDS=N runs every harness for N seconds on its checked-in seed corpus
# (tests/fuzz/corpus/<name>/) plus the inputs it finds (build-fuzz/corpus/<name>/, not committed);
# any crash, leak, timeout or out-of-memory fails, and the input is left in build-fuzz/crashes/.
FUZZ_SECONDS ?= 20
FUZZ_SRCS = $(wildcard tests/fuzz/fuzz_*.c)
FUZZ_NAMES = $(FUZZ_SRCS:tests/fuzz/%.c=%)
$(BUILD)/fuzz/%: tests/fuzz/%.c tests/fuzz/fuzz_util.h $(LIB)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  FUZZ $@")
	$(Q)$(CC) $(CFLAGS) -fsanitize=fuzzer $< $(LIB) -o $@ $(LDFLAGS_ASAN) $(LDLIBS)
fuzz:
	$(MAKE) FUZZ=1 BUILD=build-fuzz build-fuzz/libminitrain.a
	$(MAKE) FUZZ=1 BUILD=build-fuzz $(FUZZ_NAMES:%=build-fuzz/fuzz/%)
	@set -e; mkdir -p build-fuzz/crashes; for n in $(FUZZ_NAMES); do \
	  mkdir -p build-fuzz/corpus/$$n tests/fuzz/corpus/$$n; \
	  echo "== fuzz $$n ($(FUZZ_SECONDS) s)"; \
	  build-fuzz/fuzz/$$n -max_total_time=$(FUZZ_SECONDS) -timeout=10 -rss_limit_mb=2048 \
	    -max_len=65536 -print_final_stats=1 -artifact_prefix=build-fuzz/crashes/$$n- \
	    build-fuzz/corpus/$$n tests/fuzz/corpus/$$n >build-fuzz/$$n.log 2>&1 \
	    || { tail -60 build-fuzz/$$n.log; echo "fuzz $$n FAILED: input in build-fuzz/crashes/"; exit 1; }; \
	  grep -E '^#[0-9]+.*(DONE|pulse)' build-fuzz/$$n.log | tail -1; \
	  grep -E 'stat::number_of_executed_units' build-fuzz/$$n.log; \
	done; rm -rf /dev/shm/mt-fuzz-*


clean:
	rm -rf $(BUILD) build-gpu build-gpu-nompi build-asan build-nompi build-fuzz minitrain

-include $(OBJS:.o=.d) $(BUILD)/minitrain.d

# --- benchmarks (print figures; not part of make test) -----------------------------------------
BENCH_SRCS = $(wildcard bench/*.c)
BENCH_BINS = $(BENCH_SRCS:%.c=$(BUILD)/%)
$(BUILD)/bench/%: bench/%.c $(LIB)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  BENCH $@")
	$(Q)$(CC) $(CFLAGS) $< $(LIB) -o $@ $(LDFLAGS_ASAN) $(LDLIBS)
bench: $(BENCH_BINS)
	@echo "built: $(BENCH_BINS)"
