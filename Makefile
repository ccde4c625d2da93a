# rgpu — build, test, demo. `make help` lists the targets.
#
#   make          C libraries, rgpu-server, tools, rgpu._C (+ CUDA backend when nvcc exists)
#   make test     deps + build + Check unit tests + fuzz smoke + pytest
#   make demo     deps + build + train a small model on device="rgpu"
#   make deps     install Debian and Python dependencies (idempotent)
#   make fuzz     libFuzzer targets (clang-14), each for FUZZ_SECONDS (default 60)
#   make test-cuda-emu  the CUDA backend's suites on cudaemu (CUDA on the CPU, tests/cudaemu)
#   NO_DEVELOP=1  build rgpu._C without pointing site-packages at this checkout (worktrees)

SHELL   := /bin/bash
PYTHON  ?= python3
CC      ?= gcc
B       := build
# CUDA_EMU=1: the CUDA backend on cudaemu (tests/cudaemu), in its own tree
ifeq ($(CUDA_EMU),1)
B       := build-emu
endif
CSTD    := -std=c11 -D_GNU_SOURCE
WARN    := -Wall -Wextra -Werror
OPT     ?= -O2 -g
SAN     ?=
# replayer/: server -> session -> op -> cpu, cuda; backend/backend.h is the
# interface they all include. Headers by name ("session.h", "backend.h") from
# the three layer folders; op/, cpu/, cuda/ by path ("op/error.h").
REPLAYER_INC := -Ireplayer -Ireplayer/server -Ireplayer/session -Ireplayer/backend
CFLAGS_ = $(CSTD) $(WARN) $(OPT) $(SAN) -fPIC -Itrace-format -Irecorder $(REPLAYER_INC)
LIBS    := -lzstd -lsqlite3 -llapacke -lopenblas -lm -lpthread

# CUDA: nvcc may be off PATH in the toolkit's usual folder.
NVCC    ?= $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
CUDA_HOME ?= $(if $(NVCC),$(patsubst %/lib64/,%,$(dir $(firstword $(wildcard $(abspath $(dir $(realpath $(NVCC)))/../lib64/libcudart.so) /usr/local/cuda/lib64/libcudart.so /usr/local/cuda-*/lib64/libcudart.so)))))
CUDA_ARCH ?= -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90
NVFLAGS := -std=c++17 -O2 $(CUDA_ARCH) -Itrace-format $(REPLAYER_INC) -Xcompiler -Wall,-fPIC

FORMAT_SRC   := $(wildcard trace-format/*.c)
RECORDER_SRC := recorder/client.c
REPLAYER_SRC := replayer/server/server_loop.c $(wildcard replayer/session/*.c) \
                $(filter-out replayer/backend/backend_cuda_none.c,$(wildcard replayer/backend/*.c)) \
                $(wildcard replayer/cpu/*.c) $(wildcard replayer/op/*.c)
CUDA_SRC     := $(wildcard replayer/cuda/*.cu)
HEADERS      := $(wildcard trace-format/*.h trace-format/*.def recorder/*.h replayer/*/*.h replayer/*/*.inc)

FORMAT_OBJ   := $(FORMAT_SRC:%.c=$(B)/obj/%.o)
RECORDER_OBJ := $(RECORDER_SRC:%.c=$(B)/obj/%.o)
REPLAYER_OBJ := $(REPLAYER_SRC:%.c=$(B)/obj/%.o)
ifeq ($(CUDA_EMU),1)
CUDA_OBJ     := $(CUDA_SRC:%.cu=$(B)/emu/%.o)
CUDA_LIBS    := -L$(B)/lib -lcudaemu -Wl,-rpath,$(CURDIR)/$(B)/lib -lstdc++ -ldl -lpthread
else ifneq ($(NVCC),)
CUDA_OBJ     := $(CUDA_SRC:%.cu=$(B)/obj/%.o)
CUDA_LIBS    := -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcudart -lstdc++ -ldl -lpthread
else
CUDA_OBJ     := $(B)/obj/replayer/backend/backend_cuda_none.o
CUDA_LIBS    :=
endif

PYEXT := torchhook/rgpu/_C.abi3.so
SERVER := $(B)/bin/rgpu-server
TOOLS  := $(B)/bin/rgpu-replay $(B)/bin/rgpu-diff $(B)/bin/rgpu-trace
C_TESTS := $(patsubst tests/c/%.c,$(B)/tests/%,$(wildcard tests/c/test_*.c))

.PHONY: client-clang install install-run all deps deps-c deps-py test test-c test-c-run test-py test-asan demo clean help develop cuda-note fuzz fuzz-run fuzz-smoke fuzz-build test-cuda-emu-run
all: cuda-note $(B)/lib/librgpu_format.a $(B)/lib/librgpu_recorder.a $(B)/lib/librgpu_replayer.a $(SERVER) $(TOOLS) $(if $(CUDA_EMU),,$(PYEXT) $(if $(NO_DEVELOP),,develop))

help:
	@sed -n '3,9p' Makefile

cuda-note:
ifeq ($(NVCC),)
	@echo "rgpu: nvcc not found: building without the CUDA backend (cpu and null backends only)"
else
	@echo "rgpu: nvcc at $(NVCC): building the CUDA backend"
endif

# ---------------------------------------------------------------- dependencies
DEB_PKGS := libzstd-dev libxxhash-dev libsqlite3-dev check libopenblas-dev liblapacke-dev pkg-config sqlite3 openssh-server openssh-client
FUZZ_PKGS := clang-14 libclang-rt-14-dev
TRANSFORMERS_VERSION := 5.23.0
# deps-c: what the C parts need (the server and tools on a GPU host: no Python);
# deps: everything, Python too. Each target that builds or tests calls one.
deps: deps-c deps-py
deps-c:
	@missing=""; for p in $(DEB_PKGS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "rgpu: installing Debian packages:$$missing"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing >/dev/null; \
	fi
	@missing=""; for p in $(FUZZ_PKGS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "rgpu: installing Debian packages for fuzzing:$$missing"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing >/dev/null \
	    || echo "rgpu: could not install$$missing: the fuzz targets will be skipped"; \
	fi
deps-py: deps-c
	@$(PYTHON) -c 'import torch, pytest, numpy' 2>/dev/null || { \
	  echo "rgpu: installing torch==2.13.0, pytest, numpy"; \
	  $(PYTHON) -m pip install -q torch==2.13.0 pytest numpy; }
	@# expecttest, hypothesis: torch's OpInfo database (tests/py/test_opinfo.py) imports them
	@# pytest-xdist: the suite runs on every core (make test-py PYTEST_JOBS=1 for one process)
	@$(PYTHON) -c 'import xdist' 2>/dev/null || { echo "rgpu: installing pytest-xdist"; $(PYTHON) -m pip install -q pytest-xdist; }
	@$(PYTHON) -c 'import expecttest, hypothesis' 2>/dev/null || { \
	  echo "rgpu: installing expecttest, hypothesis (for torch's OpInfo samples)"; \
	  $(PYTHON) -m pip install -q expecttest hypothesis; }
	@# transformers for tests/py/test_compile_models.py; torch held at the installed version (a constraint)
	@$(PYTHON) -c 'import sys, transformers; sys.exit(transformers.__version__ != "$(TRANSFORMERS_VERSION)")' 2>/dev/null || { \
	  echo "rgpu: installing transformers==$(TRANSFORMERS_VERSION) (torch stays $$($(PYTHON) -c 'import torch; print(torch.__version__)'))"; \
	  $(PYTHON) -m pip install -q -c <(echo "torch==$$($(PYTHON) -c 'import torch; print(torch.__version__.split("+")[0])')") \
	    transformers==$(TRANSFORMERS_VERSION); }

# ---------------------------------------------------------------- C
$(B)/obj/%.o: %.c $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_) -c $< -o $@

# The cpu backend's kernels at -O3 (the vectorizer's full cost model), for
# the baseline ISA: no -march, so a trace replays bitwise on every x86-64 (or
# arm64) host; ISO C mode keeps a*b+c unfused. Sanitizer builds keep $(OPT).
# cpu_vmath_avx2.c/_avx512.c are the exception, chosen at run time by
# cpu_vmath.c: the same rows as the baseline's, bit for bit, only wider.
# -fno-trapping-math lets selects on floats vectorise (it changes no value);
# -ffp-contract=off is -std=c11's default, said again because cpu_vmath_avx*.c
# are built for ISAs that have FMA (their results must equal the baseline's).
KERNEL_OPT ?= $(if $(SAN),,-O3)
$(B)/obj/replayer/cpu/%.o: CFLAGS_ += $(KERNEL_OPT) -ffp-contract=off -fno-trapping-math

$(B)/obj/%.o: %.cu $(HEADERS) $(wildcard replayer/cuda/*.cuh)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) -c $< -o $@

$(B)/lib/librgpu_format.a: $(FORMAT_OBJ)
	@mkdir -p $(dir $@); rm -f $@; ar rcs $@ $^
$(B)/lib/librgpu_recorder.a: $(RECORDER_OBJ)
	@mkdir -p $(dir $@); rm -f $@; ar rcs $@ $^
$(B)/lib/librgpu_replayer.a: $(REPLAYER_OBJ) $(CUDA_OBJ)
	@mkdir -p $(dir $@); rm -f $@; ar rcs $@ $^

$(SERVER): $(B)/obj/replayer/server/server_main.o $(B)/lib/librgpu_replayer.a $(B)/lib/librgpu_format.a
	@mkdir -p $(dir $@)
	$(CC) $(SAN) -o $@ $^ $(LIBS) $(CUDA_LIBS)

# Offline tools (tools/): linked like the server.
$(TOOLS:$(B)/bin/%=$(B)/obj/tools/%.o) $(B)/obj/tools/trace_common.o: tools/trace_common.h
$(TOOLS): $(B)/bin/%: $(B)/obj/tools/%.o $(B)/obj/tools/trace_common.o $(B)/lib/librgpu_replayer.a $(B)/lib/librgpu_format.a
	@mkdir -p $(dir $@)
	$(CC) $(SAN) -o $@ $^ $(LIBS) $(CUDA_LIBS)

# ---------------------------------------------------------------- Python extension (abi3)
PY_INC := $(shell $(PYTHON) -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
$(PYEXT): recorder/pyext.c $(RECORDER_OBJ) $(FORMAT_OBJ) $(HEADERS)
	$(CC) $(CFLAGS_) -I$(PY_INC) -shared -o $@ recorder/pyext.c $(RECORDER_OBJ) $(FORMAT_OBJ) -lzstd -lsqlite3 -lpthread

# `import rgpu` from anywhere uses this checkout (like an editable install).
develop: $(PYEXT)
	@site=$$($(PYTHON) -c 'import site; print(site.getsitepackages()[0])'); \
	want="$(CURDIR)/torchhook"; \
	if [ "$$(cat $$site/rgpu-checkout.pth 2>/dev/null)" != "$$want" ]; then \
	  echo "$$want" > $$site/rgpu-checkout.pth && echo "rgpu: $$site/rgpu-checkout.pth -> $$want"; fi; \
	di=$$site/rgpu-0.1.0.dist-info; \
	if [ ! -f $$di/entry_points.txt ]; then mkdir -p $$di && \
	  printf 'Metadata-Version: 2.1\nName: rgpu\nVersion: 0.1.0\n' > $$di/METADATA && \
	  printf '[torch_dynamo_backends]\nrgpu = rgpu.compile:rgpu_backend\n' > $$di/entry_points.txt && \
	  echo "rgpu: torch.compile backend \"rgpu\" registered in $$di"; fi

# ---------------------------------------------------------------- tests
$(B)/tests/%: tests/c/%.c $(wildcard tests/c/*.h) $(B)/lib/librgpu_replayer.a $(B)/lib/librgpu_recorder.a $(B)/lib/librgpu_format.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_) -o $@ $< $(B)/lib/librgpu_replayer.a $(B)/lib/librgpu_recorder.a $(B)/lib/librgpu_format.a \
	  $$(pkg-config --cflags --libs check) $(LIBS) $(CUDA_LIBS)

# Each documented target works on a fresh clone on its own: it installs what
# it needs, then builds what its tests call (a second make, so that -j never
# starts a compile before the packages are there).
test-c: deps-c
	@$(MAKE) --no-print-directory test-c-run
test-c-run: $(C_TESTS) $(SERVER) $(TOOLS)
	@$(PYTHON) tools/gen_ops.py --check
	@tools/check-symbols.sh $(B)/lib/librgpu_replayer.a $(B)/lib/librgpu_recorder.a $(B)/lib/librgpu_format.a
	@set -e; for t in $(C_TESTS); do echo "== $$t"; RGPU_SERVER_BIN=$(CURDIR)/$(SERVER) $$t; done

test-py: deps
	@$(MAKE) --no-print-directory all
	$(PYTHON) -m pytest -q $(if $(filter 1,$(PYTEST_JOBS)),,-n $(PYTEST_JOBS) --dist loadfile) tests/py

test: deps
	@$(MAKE) --no-print-directory all
	@$(MAKE) --no-print-directory test-c
	@$(MAKE) --no-print-directory client-clang
	@$(MAKE) --no-print-directory fuzz-smoke
	@$(MAKE) --no-print-directory test-py
	@if [ -n "$(CUDA_INC)" ]; then $(MAKE) --no-print-directory test-cuda-emu; \
	else echo "rgpu: no CUDA toolkit headers: test-cuda-emu (the CUDA backend on cudaemu) skipped"; fi

# The client (recorder/, the extension, trace-format/) with a second
# compiler, clang, as a macOS laptop would build it: warnings are errors.
client-clang:
	@if command -v $(FUZZ_CC) >/dev/null 2>&1; then \
	  for f in $(RECORDER_SRC) recorder/pyext.c $(FORMAT_SRC); do \
	    $(FUZZ_CC) $(CSTD) -Wall -Wextra -Werror -fsyntax-only -Itrace-format -Irecorder -I$(PY_INC) $$f || exit 1; \
	  done; echo "rgpu: the client compiles with $(FUZZ_CC) -Wall -Wextra -Werror"; \
	else echo "rgpu: $(FUZZ_CC) not found: client-clang skipped (make deps installs it)"; fi

# Sanitizer build of the C parts in its own tree.
# (sanitizers slow the suites down: Check's per-test timeouts are stretched)
test-asan: deps-c
	@CK_TIMEOUT_MULTIPLIER=10 ASAN_OPTIONS=quarantine_size_mb=64 $(MAKE) --no-print-directory B=build-asan SAN="-fsanitize=address,undefined -fno-omit-frame-pointer" OPT="-O1 -g" \
	  NVCC= test-c-run

demo: deps
	@$(MAKE) --no-print-directory all
	$(PYTHON) tools/demo.py

# ---------------------------------------------------------------- fuzzing (libFuzzer, clang-14)
# Targets in tests/fuzz/: record decoder, frame codec + wire header, .rgt
# reader, and rgpu-server's message loop (server_loop.c linked, one session
# per input over a socketpair). Built in build-fuzz/ with ASan+UBSan; seeds
# from tests/fuzz/make_seeds.c; corpora grow in build-fuzz/corpus/, crashes
# land in build-fuzz/crashes/. `make fuzz` runs each FUZZ_SECONDS; `make test`
# runs each FUZZ_SMOKE_SECONDS.
FZ           := build-fuzz
FUZZ_CC      ?= clang-14
FUZZ_SECONDS ?= 60
FUZZ_SMOKE_SECONDS ?= 8
FUZZ_TARGETS := record frame rgt server
FUZZ_CFLAGS  := $(CSTD) -Wall -Wextra -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined \
                -fno-sanitize-recover=undefined -Itrace-format -Irecorder $(REPLAYER_INC)
FUZZ_FMT_OBJ := $(FORMAT_SRC:%.c=$(FZ)/obj/%.o)
FUZZ_REP_OBJ := $(REPLAYER_SRC:%.c=$(FZ)/obj/%.o) $(FZ)/obj/replayer/backend/backend_cuda_none.o

$(FZ)/obj/%.o: %.c $(HEADERS)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -c $< -o $@

$(FZ)/bin/fuzz_server: tests/fuzz/fuzz_server.c $(FUZZ_REP_OBJ) $(FUZZ_FMT_OBJ)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer -o $@ $< $(FUZZ_REP_OBJ) $(FUZZ_FMT_OBJ) $(LIBS)
$(FZ)/bin/fuzz_%: tests/fuzz/fuzz_%.c $(FUZZ_FMT_OBJ)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer -o $@ $< $(FUZZ_FMT_OBJ) $(LIBS)
$(FZ)/seeds/.done: tests/fuzz/make_seeds.c $(B)/lib/librgpu_format.a
	@mkdir -p $(FZ)/seeds
	$(CC) $(CFLAGS_) -o $(FZ)/make_seeds $< $(B)/lib/librgpu_format.a $(LIBS)
	rm -rf $(FZ)/seeds/*/ && $(FZ)/make_seeds $(FZ)/seeds && touch $@

fuzz-build: $(FUZZ_TARGETS:%=$(FZ)/bin/fuzz_%) $(FZ)/seeds/.done

# Each target runs FUZZ_SECONDS; a crash, leak or UB report fails make (its
# log is shown; the input is in build-fuzz/crashes/).
fuzz: deps-c
	@$(MAKE) --no-print-directory fuzz-run
fuzz-run: fuzz-build
	@mkdir -p $(FZ)/crashes; for t in $(FUZZ_TARGETS); do \
	  case $$t in rgt) ml=131072;; server) ml=65536;; *) ml=16384;; esac; \
	  mkdir -p $(FZ)/corpus/$$t; echo "== fuzz_$$t for $(FUZZ_SECONDS) s"; \
	  $(FZ)/bin/fuzz_$$t -max_total_time=$(FUZZ_SECONDS) -max_len=$$ml -timeout=20 -rss_limit_mb=3072 \
	    -print_final_stats=1 -artifact_prefix=$(FZ)/crashes/$$t- $(FZ)/corpus/$$t $(FZ)/seeds/$$t \
	    > $(FZ)/fuzz_$$t.log 2>&1 || { tail -60 $(FZ)/fuzz_$$t.log; echo "fuzz_$$t FAILED"; exit 1; }; \
	  grep -E "stat::number_of_executed_units|stat::peak_rss_mb" $(FZ)/fuzz_$$t.log; \
	done

# Inside `make test`: a short run of each, skipped (with a note) without clang-14.
fuzz-smoke:
	@if command -v $(FUZZ_CC) >/dev/null 2>&1; then \
	  $(MAKE) --no-print-directory fuzz-run FUZZ_SECONDS=$(FUZZ_SMOKE_SECONDS); \
	else echo "rgpu: $(FUZZ_CC) not found: fuzz smoke skipped (make deps installs it)"; fi

# The server and the tools onto a GPU host, no Python or torch needed there
# (the CUDA backend is in when nvcc exists): make install PREFIX=~/.local
PREFIX ?= /usr/local
install: deps-c
	@$(MAKE) --no-print-directory install-run
install-run: $(SERVER) $(TOOLS)
	install -d $(DESTDIR)$(PREFIX)/bin
	install -m 0755 $(SERVER) $(TOOLS) $(DESTDIR)$(PREFIX)/bin/
	@echo "rgpu: installed rgpu-server, rgpu-replay, rgpu-diff, rgpu-trace in $(DESTDIR)$(PREFIX)/bin"

clean:
	rm -rf $(B) build-asan $(FZ) $(PYEXT)

# ---------------------------------------------------------------- CUDA on the CPU (tests/cudaemu)
# cudaemu compiles replayer/cuda/*.cu unchanged with g++ against the toolkit's
# headers (rewrite.py turns <<<...>>> into a launch call), runs kernels as
# fibers on the CPU, and supplies a reference cuBLAS through the backend's own
# loader. `make CUDA_EMU=1 all` builds the server and tools on it in
# build-emu/; `make test-cuda-emu` runs the backend's tests on it (README there).
EMU_B      := build-emu
CXX        ?= g++
CUDA_INC   ?= $(patsubst %/cuda_runtime_api.h,%,$(firstword $(wildcard $(if $(NVCC),$(dir $(realpath $(NVCC)))../include/cuda_runtime_api.h) /usr/local/cuda/include/cuda_runtime_api.h /usr/local/cuda-*/include/cuda_runtime_api.h)))
EMU_DIR    := tests/cudaemu
EMU_CXX    := $(CXX) -std=c++17 $(OPT) $(SAN) -fPIC -ffp-contract=off -Wall -Werror -I$(CUDA_INC) -I$(EMU_DIR)
EMU_KFLAGS := -x c++ -Wno-unknown-pragmas -include cudaemu.h -Itrace-format $(REPLAYER_INC)
EMU_CUH    := $(patsubst %,$(EMU_B)/emu/src/%,$(wildcard replayer/cuda/*.cuh))
EMU_LIBS   := $(EMU_B)/lib/libcudaemu.so $(EMU_B)/lib/libcublas.so.13 $(EMU_B)/lib/libcusolver.so.12 \
              $(EMU_B)/lib/libcufft.so.12 $(EMU_B)/lib/libcudnn.so.9

# (kept: compiler messages point at replayer/cuda/ through #line, the copies help a debugger)
.PRECIOUS: $(EMU_B)/emu/src/%
$(EMU_B)/emu/src/%: % $(EMU_DIR)/rewrite.py
	@mkdir -p $(dir $@)
	$(PYTHON) $(EMU_DIR)/rewrite.py $< $@
$(EMU_B)/emu/%.o: $(EMU_B)/emu/src/%.cu $(EMU_CUH) $(HEADERS) $(EMU_DIR)/cudaemu.h
	@mkdir -p $(dir $@)
	$(EMU_CXX) $(EMU_KFLAGS) -c $< -o $@
$(EMU_B)/lib/libcudaemu.so: $(EMU_DIR)/runtime.cpp $(EMU_DIR)/cudaemu.h $(EMU_DIR)/cudaemu_api.h
	@mkdir -p $(dir $@)
	$(EMU_CXX) -shared -o $@ $< -lpthread
$(EMU_B)/lib/libcublas.so.13: $(EMU_DIR)/cublas_emu.cpp $(EMU_DIR)/emu_elem.h $(EMU_B)/lib/libcudaemu.so
	@mkdir -p $(dir $@)
	$(EMU_CXX) -shared -Wl,-soname,libcublas.so.13 -o $@ $< -L$(EMU_B)/lib -lcudaemu -Wl,-rpath,$(CURDIR)/$(EMU_B)/lib
$(EMU_B)/lib/libcudnn.so.9: $(EMU_DIR)/cudnn_emu.cpp $(EMU_DIR)/emu_elem.h $(EMU_B)/lib/libcudaemu.so
	@mkdir -p $(dir $@)
	$(EMU_CXX) -shared -Wl,-soname,libcudnn.so.9 -o $@ $< -L$(EMU_B)/lib -lcudaemu -Wl,-rpath,$(CURDIR)/$(EMU_B)/lib
$(EMU_B)/lib/libcusolver.so.12: $(EMU_DIR)/cusolver_emu.cpp $(EMU_B)/lib/libcudaemu.so
	@mkdir -p $(dir $@)
	$(EMU_CXX) -shared -Wl,-soname,libcusolver.so.12 -o $@ $< -L$(EMU_B)/lib -lcudaemu -Wl,-rpath,$(CURDIR)/$(EMU_B)/lib -llapacke -lopenblas
# cuFFT's reference computes with the project's own host FFT (replayer/op/fft_plan.c), linked in hidden
$(EMU_B)/lib/libcufft.so.12: $(EMU_DIR)/cufft_emu.cpp replayer/op/fft_plan.c replayer/op/fft.h $(EMU_B)/lib/libcudaemu.so
	@mkdir -p $(dir $@) $(EMU_B)/emu
	$(CC) $(CSTD) $(WARN) $(OPT) $(SAN) -fPIC -fvisibility=hidden -Itrace-format $(REPLAYER_INC) -c replayer/op/fft_plan.c -o $(EMU_B)/emu/fft_ref.o
	$(EMU_CXX) -Itrace-format $(REPLAYER_INC) -shared -Wl,-soname,libcufft.so.12 -o $@ $< $(EMU_B)/emu/fft_ref.o -L$(EMU_B)/lib -lcudaemu -Wl,-rpath,$(CURDIR)/$(EMU_B)/lib -lm
ifeq ($(CUDA_EMU),1)
$(SERVER) $(TOOLS) $(C_TESTS): | $(EMU_LIBS)
endif

# The layer's own tests: kernels written for them, through the same pipeline.
$(EMU_B)/tests/test_cudaemu: $(EMU_B)/emu/src/$(EMU_DIR)/test_cudaemu.cu $(EMU_DIR)/cudaemu.h $(EMU_LIBS)
	@mkdir -p $(dir $@)
	$(EMU_CXX) $(EMU_KFLAGS) -o $@ $< -L$(EMU_B)/lib -lcudaemu -Wl,-rpath,$(CURDIR)/$(EMU_B)/lib -ldl

.PHONY: cuda-emu test-cuda-emu test-cuda-emu-quick
cuda-emu:
	@test -n "$(CUDA_INC)" || { echo "rgpu: no CUDA toolkit headers (cuda_runtime_api.h): cudaemu cannot be built"; exit 1; }
	@$(MAKE) --no-print-directory CUDA_EMU=1 all $(EMU_B)/tests/test_cudaemu \
	  $(patsubst $(B)/tests/%,$(EMU_B)/tests/%,$(filter %/test_server %/test_tools %/test_selfcheck %/test_server_files,$(C_TESTS)))
	@$(MAKE) --no-print-directory $(PYEXT) $(if $(NO_DEVELOP),,develop)

# EMU_CONFORMANCE_ORDERS: the thread orders the conformance suite runs in (reverse too: make test-cuda-emu EMU_CONFORMANCE_ORDERS="forward reverse random"; about
# a minute each on 2 cores).
# PYTEST_JOBS: pytest processes for test-py (pytest-xdist, whole files per process).
PYTEST_JOBS ?= $(shell nproc 2>/dev/null || echo 2)
EMU_CONFORMANCE_ORDERS ?= forward random
test-cuda-emu: deps
	@$(MAKE) --no-print-directory cuda-emu
	@$(MAKE) --no-print-directory test-cuda-emu-run
test-cuda-emu-run:
	@EMU_B=$(EMU_B) PYTHON=$(PYTHON) JOBS=$(PYTEST_JOBS) ORDERS="$(EMU_CONFORMANCE_ORDERS)" $(EMU_DIR)/run-tests.sh
