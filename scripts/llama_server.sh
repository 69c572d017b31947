#!/usr/bin/env bash
# Build llama.cpp's OpenAI-compatible server (llama-server) into .llama/bin, from the llama.cpp
# source that the llama-cpp-python sdist on PyPI carries (this project's machines reach PyPI,
# not GitHub). `make test-served` then runs the judge against it (tests/test_served_judge.py).
# About 8 minutes on 2 cores; a second run reuses the build.
#
# The CPU flags are chosen from /proc/cpuinfo with GGML_NATIVE off and AMX off: a native build
# on a virtual machine whose CPU advertises AMX that the host has not enabled dies with
# "invalid opcode" on the first request.
set -euo pipefail
cd "$(dirname "$0")/.."

VERSION="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
DEST="${LLAMA_DIR:-.llama}"
PYTHON="${PYTHON:-.venv/bin/python}"
[ -x "$PYTHON" ] || PYTHON=python3

if [ -x "$DEST/bin/llama-server" ] && [ "$(cat "$DEST/version" 2>/dev/null)" = "$VERSION" ]; then
    echo "llama-server $VERSION: $DEST/bin/llama-server (already built)"
    exit 0
fi
for tool in cmake c++ tar; do
    command -v "$tool" > /dev/null || { echo "llama_server.sh: $tool is missing (apt-get install cmake g++)" >&2; exit 2; }
done

mkdir -p "$DEST/src" "$DEST/bin"
"$PYTHON" -m pip download --quiet --no-deps --no-binary :all: "llama-cpp-python==$VERSION" -d "$DEST/src"
tar -xzf "$DEST/src/llama_cpp_python-$VERSION.tar.gz" -C "$DEST/src"
SOURCE="$DEST/src/llama_cpp_python-$VERSION/vendor/llama.cpp"

flags=$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null || true)
has() { [[ " $flags " == *" $1 "* ]] && echo ON || echo OFF; }
cmake -S "$SOURCE" -B "$DEST/build" -DCMAKE_BUILD_TYPE=Release \
    -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DGGML_NATIVE=OFF -DGGML_AVX="$(has avx)" -DGGML_AVX2="$(has avx2)" -DGGML_FMA="$(has fma)" \
    -DGGML_F16C="$(has f16c)" -DGGML_AVX512="$(has avx512f)" \
    -DGGML_AVX512_VNNI="$(has avx512_vnni)" -DGGML_AVX512_BF16="$(has avx512_bf16)" \
    -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF > "$DEST/cmake.log"
cmake --build "$DEST/build" --target llama-server -j "$(nproc)" > "$DEST/build.log"
ln -sf "$(cd "$DEST/build/bin" && pwd)/llama-server" "$DEST/bin/llama-server"
echo "$VERSION" > "$DEST/version"
echo "llama-server $VERSION: $DEST/bin/llama-server"
