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
#   WHEELS       where the built llama-cpp-python wheel is kept between installs
#   LLAMA        the llama-cpp-python requirement (only built when EXTRAS include dev or llama)
#   CONSTRAINTS  optional pip constraints file (the images pin Ray, which must be one version cluster-wide)
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

# shellcheck disable=SC2086 # VENV_ARGS is a list of words
"$PYTHON" -m venv $VENV_ARGS "$VENV"
"$VENV/bin/pip" install --quiet --upgrade pip

pip_args=(--quiet --find-links "$WHEELS")
[[ -n "$CONSTRAINTS" ]] && pip_args+=(-c "$CONSTRAINTS")

# llama-cpp-python ships only a source package: build its wheel once (~10 min on 2 cores) and keep it.
case ",$EXTRAS," in
  *,dev,* | *,llama,*)
    ls "$WHEELS"/llama_cpp_python-"${LLAMA#*==}"-*.whl > /dev/null 2>&1 \
      || "$VENV/bin/pip" wheel --quiet --no-deps -w "$WHEELS" "$LLAMA"
    ;;
esac

if [[ "$EDITABLE" == 1 ]]; then
  "$VENV/bin/pip" install "${pip_args[@]}" -e ".[$EXTRAS]"
else
  "$VENV/bin/pip" install "${pip_args[@]}" --no-cache-dir ".[$EXTRAS]"
fi
