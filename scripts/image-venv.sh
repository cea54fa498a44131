#!/bin/sh
# The build stage of every image (Dockerfile.*), in two steps so that the first is one cached
# layer for all of them:
#   image-venv.sh proton         the venv /opt/routernet with python-qpid-proton, built from its
#                                sdist against OpenSSL and Cyrus SASL (only a build that finds
#                                Cyrus verifies PLAIN; its build silently drops either library
#                                pkg-config cannot find: see scripts/system-deps.sh, Makefile)
#   image-venv.sh install GROUP  routernet from /src into it, with that optional group of
#                                pyproject.toml ("" for none: the router's dependencies alone);
#                                then pip and setuptools leave it (nothing runs them in a pod)
set -eu
venv=/opt/routernet
case $1 in
proton)
    python -m venv "$venv"
    # The version range lives in pyproject.toml alone.
    proton=$(python -c 'import tomllib; deps = tomllib.load(open("/src/pyproject.toml", "rb"))["project"]["dependencies"]; print(next(d for d in deps if d.startswith("python-qpid-proton")))')
    "$venv/bin/pip" install --no-cache-dir --no-binary python-qpid-proton "$proton"
    "$venv/bin/python" -c 'import sys, cproton_ffi; sys.exit(not cproton_ffi.lib.pn_sasl_extended())' \
        || { echo "python-qpid-proton was built without Cyrus SASL" >&2; exit 1; }
    ;;
install)
    "$venv/bin/pip" install --no-cache-dir "/src${2:+[$2]}"
    "$venv/bin/pip" uninstall --yes --quiet pip setuptools
    ;;
*)
    echo "usage: image-venv.sh proton | install GROUP" >&2
    exit 2
    ;;
esac
