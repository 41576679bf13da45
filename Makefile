# The README's two commands. Both create .venv with pip when it is missing (pip, not uv/poetry: torch==2.13.0
# must come from the local CPU wheel) and reuse it otherwise.
VENV ?= .venv
PY := $(VENV)/bin/python
# Test processes: one per core of CI's 2-core machine (each pinned to 1 torch thread by tests/conftest.py); whole
# files go to one process (--dist loadfile), so a file's module fixtures (compiled bundles) are built once.
TEST_WORKERS ?= 2
STAMP := $(VENV)/.ditskip-installed

.PHONY: demo test venv clean native native-arm64

venv: $(STAMP)

$(STAMP): requirements.txt pyproject.toml
	@test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.txt
	$(PY) -m pip install -q --no-deps -e .
	@touch $(STAMP)

demo: $(STAMP)
	$(PY) -m examples.demo

# The native runtime is built for both architectures first (the parity tests run it on x86-64 and, under qemu, arm64).
test: $(STAMP) native native-arm64
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile tests

clean:
	rm -rf demo_out .pytest_cache

# The native device runtime (device_runtime/): libditskip.so and ditskip-run, against the ExecuTorch C++ SDK the
# pinned wheel ships (headers and libraries in site-packages/executorch). Incremental: cmake + ninja, -j2.
NATIVE_JOBS ?= 2
ET_SDK = $(shell $(PY) -c 'import executorch;print(list(executorch.__path__)[0])')

native: $(STAMP)
	cmake -S device_runtime -B build/native -G Ninja -DCMAKE_BUILD_TYPE=Release -DEXECUTORCH_ROOT=$(ET_SDK)
	cmake --build build/native -j $(NATIVE_JOBS)

# arm64 (the phone's instruction set), cross-built; run under emulation:
#   qemu-aarch64-static -L /usr/aarch64-linux-gnu build/native-arm64/ditskip-run train ...
native-arm64: $(STAMP)
	PIP="$(VENV)/bin/pip" device_runtime/scripts/arm64_sdk.sh build/executorch-arm64 $(ET_SDK)
	cmake -S device_runtime -B build/native-arm64 -G Ninja -DCMAKE_BUILD_TYPE=Release \
	  -DCMAKE_TOOLCHAIN_FILE=$(CURDIR)/device_runtime/cmake/aarch64-linux-gnu.cmake \
	  -DEXECUTORCH_ROOT=$(CURDIR)/build/executorch-arm64/executorch
	cmake --build build/native-arm64 -j $(NATIVE_JOBS)
