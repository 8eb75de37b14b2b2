# A07 Softmax & Fused Kernels. The two commands a newcomer needs:
#   make run    every lab on the best backend this machine has (creates .venv on first use)
#   make test   unit tests and every notebook under nbval (creates .venv on first use)
# `make help` lists the rest.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON  ?= python3
VENV    ?= .venv
PY      := $(VENV)/bin/python
A07     := $(VENV)/bin/a07
SM_ARCH ?= sm_90
GPU_ARCH ?= gfx942
ITEMS   ?=
comma   := ,
NVCC    ?= nvcc
HIPCC   ?= hipcc
EX      ?= 01
DIR     ?= submissions

HAS_NVIDIA := $(shell nvidia-smi -L >/dev/null 2>&1 && echo 1)
HAS_AMD    := $(shell rocminfo 2>/dev/null | grep -q 'Name: *gfx' && echo 1)
# NVIDIA: CuPy for the driver's CUDA major version (override: make run CUPY_EXTRA=,cuda12).
CUDA_MAJOR := $(shell nvidia-smi 2>/dev/null | sed -n 's/.*CUDA Version: *\([0-9]*\).*/\1/p' | head -1)
CUPY_EXTRA ?= $(if $(HAS_NVIDIA),$(if $(filter 12,$(CUDA_MAJOR)),$(comma)cuda12,$(comma)cuda13),)
# The layers .venv gets: the course, its test tools and JupyterLab (pyproject.toml).
EXTRAS ?= test,lab$(CUPY_EXTRA)
# No GPU: the CPU build of torch, not a multi-GB CUDA one. TORCH_INDEX can name PyTorch's CPU
# wheel index where plain `pip install torch` would fetch a CUDA build.
TORCH_CPU   ?= torch==2.13.0
TORCH_INDEX ?=

GPU_FLAGS := -O3 -std=c++17 -Icommon -Icuda $(if $(ITEMS),-DITEMS=$(ITEMS))

.PHONY: help run test lab doctor cuda run-cuda hip run-hip triton bench results check grade notebooks slides clean venv

help:
	@echo "make run                 doctor, then every lab on the best backend found"
	@echo "make test                unit tests + every notebook under nbval (no GPU needed)"
	@echo "make lab                 JupyterLab on notebooks/"
	@echo "make doctor              the preflight: what runs natively, in the interpreter, compile-only"
	@echo "make cuda SM_ARCH=sm_90  build the CUDA lab programs (ITEMS=8 to hold longer rows); make run-cuda runs them"
	@echo "make hip GPU_ARCH=gfx942 build the HIP lab programs; make run-hip runs them"
	@echo "make triton              Lab 3: Triton kernels (GPU, or the CPU interpreter)"
	@echo "make bench               the benchmark, on a GPU: writes results/<gpu>/bench.json + plots"
	@echo "make results             on a GPU: every file of results/<gpu>/ (bench, sweeps, sanitizer, ncu bytes, attention, cross-entropy, scale-mask, nbval)"
	@echo "Every target runs the a07 command (.venv/bin/a07 --help); make only bootstraps .venv."
	@echo "make check EX=01         check your exercise (SOLUTION=1 checks the solution)"
	@echo "make grade DIR=subs      check every learner's folder in DIR, write DIR/grades.md"
	@echo "make slides              every notebook as a reveal.js deck in slides/"
	@echo "make notebooks           re-execute the notebooks on the CPU and store their outputs"
	@echo "make clean               remove build outputs (keeps .venv)"

venv: $(VENV)/.ready

$(VENV)/.ready: pyproject.toml setup.py
	@echo "== creating $(VENV) (first run only; later runs reuse it)"
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@if [ -z "$(HAS_NVIDIA)$(HAS_AMD)" ]; then \
	  echo "== no GPU found: installing the CPU build of torch ($(TORCH_CPU))"; \
	  $(PY) -m pip install -q $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX)) "$(TORCH_CPU)"; \
	fi
	@if [ -n "$(HAS_AMD)" ]; then \
	  echo "== AMD GPU found: install ROCm torch and CuPy yourself first (README, 'AMD GPUs')"; fi
	$(PY) -m pip install -q -e ".[$(EXTRAS)]"
	@touch $@

run: venv
	$(A07) run

test: venv
	$(PY) -m pytest tests notebooks --nbval --nbval-sanitize-with notebooks/sanitize.cfg \
	  --nbval-current-env -p no:cacheprovider

lab: venv
	$(PY) -m jupyter lab notebooks/

doctor: venv
	@$(A07) doctor

cuda:
	@command -v $(NVCC) >/dev/null || { echo "make cuda: nvcc not found; install the CUDA toolkit, or use the notebooks (CuPy compiles the same sources)"; exit 1; }
	@mkdir -p cuda/bin
	$(NVCC) $(GPU_FLAGS) -arch=$(SM_ARCH) -Xptxas -v cuda/softmax.cu -o cuda/bin/softmax
	$(NVCC) $(GPU_FLAGS) -arch=$(SM_ARCH) cuda/fused_softmax.cu -o cuda/bin/fused_softmax

run-cuda: cuda
	@[ -n "$(HAS_NVIDIA)" ] || { echo "make run-cuda: no NVIDIA GPU here (nvidia-smi finds none); the programs are built in cuda/bin, and results/nvidia-h200/run-cuda.txt shows an H200 run"; exit 1; }
	./cuda/bin/softmax $(ROWS) $(COLS)
	./cuda/bin/fused_softmax

hip:
	@command -v $(HIPCC) >/dev/null || { echo "make hip: hipcc not found; install ROCm (or, to compile only, apt-get install hipcc)"; exit 1; }
	@mkdir -p hip/bin
	HIP_PLATFORM=amd $(HIPCC) $(GPU_FLAGS) --offload-arch=$(GPU_ARCH) hip/softmax.cpp -o hip/bin/softmax
	HIP_PLATFORM=amd $(HIPCC) $(GPU_FLAGS) --offload-arch=$(GPU_ARCH) hip/fused_softmax.cpp -o hip/bin/fused_softmax

run-hip: hip
	@[ -n "$(HAS_AMD)" ] || { echo "make run-hip: no AMD GPU here (rocminfo finds none); the programs are built in hip/bin"; exit 1; }
	./hip/bin/softmax $(ROWS) $(COLS)
	./hip/bin/fused_softmax

triton: venv
	$(A07) run --lab triton

bench: venv
	$(A07) bench

results: venv
	$(A07) results

check: venv
	$(A07) check $(EX) $(if $(filter 1,$(SOLUTION)),--solution)

grade: venv
	$(A07) grade $(DIR)

notebooks: venv
	$(A07) notebooks

slides: venv
	$(A07) slides --out slides

clean:
	rm -rf cuda/bin hip/bin slides .pytest_cache
