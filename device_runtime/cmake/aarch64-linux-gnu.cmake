# Cross build for 64-bit Arm Linux (the phone's instruction set; runs here under qemu-aarch64-static):
#   scripts/arm64_sdk.sh      # the arm64 wheel's libraries + the x86-64 wheel's headers -> build/executorch-arm64
#   cmake -S device_runtime -B build/native-arm64 -G Ninja \
#     -DCMAKE_TOOLCHAIN_FILE=device_runtime/cmake/aarch64-linux-gnu.cmake \
#     -DEXECUTORCH_ROOT=build/executorch-arm64/executorch
#   qemu-aarch64-static -L /usr/aarch64-linux-gnu build/native-arm64/ditskip-run ...
# Debian's g++-aarch64-linux-gnu (compiler; glibc and libstdc++ under /usr/aarch64-linux-gnu, which it finds by
# itself), libssl-dev:arm64 (libcrypto in /usr/lib/aarch64-linux-gnu, its configuration headers in
# /usr/include/aarch64-linux-gnu) and libutf8proc-dev:arm64 (libutf8proc in /usr/lib/aarch64-linux-gnu). The
# header-only nlohmann json and stb, and OpenSSL's and utf8proc's architecture-independent headers, come from the host's /usr/include through links (CMakeLists.txt: DITSKIP_HOST_HEADERS).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)

set(DITSKIP_CRYPTO_LIBRARY /usr/lib/aarch64-linux-gnu/libcrypto.so CACHE FILEPATH "the target's libcrypto")
set(DITSKIP_UTF8PROC_LIBRARY /usr/lib/aarch64-linux-gnu/libutf8proc.so CACHE FILEPATH "the target's utf8proc")
set(DITSKIP_HOST_HEADERS /usr/include CACHE PATH "architecture-independent headers (nlohmann, stb, openssl, utf8proc)")
set(DITSKIP_HOST_ARCH_HEADERS /usr/include/aarch64-linux-gnu CACHE PATH "the target's multiarch headers (openssl)")
# Under qemu-aarch64-static -L /usr/aarch64-linux-gnu the interpreter is the cross toolchain's ld.so
# (/usr/aarch64-linux-gnu/lib), but its default search finds the C library in /lib/aarch64-linux-gnu first when the
# multiarch libc6:arm64 is installed (libssl-dev:arm64 brings it): another build of glibc than that ld.so, and
# pthread_create then spins forever in its stack cache. The toolchain's own lib folder first in the run path keeps
# libc, libm and libstdc++ from the same build as the interpreter (a path that does not exist on a device: ignored).
set(DITSKIP_EXTRA_RPATH /usr/aarch64-linux-gnu/lib CACHE STRING "the cross toolchain's C library, before multiarch")
set(CMAKE_EXE_LINKER_FLAGS_INIT "-Wl,-rpath-link,/usr/lib/aarch64-linux-gnu")
set(CMAKE_SHARED_LINKER_FLAGS_INIT "-Wl,-rpath-link,/usr/lib/aarch64-linux-gnu")
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64-static -L /usr/aarch64-linux-gnu)
