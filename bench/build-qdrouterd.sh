#!/bin/sh
# Builds qdrouterd 1.19 from an apache/qpid-dispatch checkout against Debian's Proton C
# (libqpid-proton11-dev, which ships no CMake package: one is written here), for the bench's
# QDROUTERD. No registry ships qdrouterd. Console, docs and Dispatch's own tests are left out.
#
#   bench/build-qdrouterd.sh QPID_DISPATCH_SOURCE PREFIX
#   QDROUTERD=PREFIX/qdrouterd make bench
#
# Debian's Proton C is built without Cyrus SASL, so that qdrouterd cannot check PLAIN users
# (tests/test_policy_network.py's users log in so). With PROTON_SOURCE set to an apache/qpid-proton
# checkout (0.37.0, Debian's version), that Proton is built first with Cyrus and OpenSSL into
# PREFIX/proton and qdrouterd against it:
#
#   PROTON_SOURCE=QPID_PROTON_SOURCE bench/build-qdrouterd.sh QPID_DISPATCH_SOURCE PREFIX
#
# PREFIX/qdrouterd is a wrapper that sets the PYTHONPATH Dispatch's Python modules need; qdstat
# and qdmanage run the same way: PREFIX/qdstat -b HOST:PORT -g (with a Python that has proton).
set -eu
src=$(realpath "$1")
prefix=$(realpath -m "$2")
work="$prefix/build"
mkdir -p "$work/proton" "$work/source"

libpath=""
if [ -n "${PROTON_SOURCE:-}" ]; then
  cmake -S "$(realpath "$PROTON_SOURCE")" -B "$work/proton-build" -DCMAKE_INSTALL_PREFIX="$prefix/proton" \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DBUILD_BINDINGS= -DBUILD_CPP=OFF -DBUILD_EXAMPLES=OFF \
    -DBUILD_TESTING=OFF -DBUILD_TOOLS=OFF -DSASL_IMPL=cyrus -DSSL_IMPL=openssl -DENABLE_WARNING_ERROR=OFF
  cmake --build "$work/proton-build" -j "$(nproc)"
  cmake --install "$work/proton-build"
  proton_dir=$(dirname "$(find "$prefix/proton" -name ProtonConfig.cmake | head -1)")
  libpath=$(dirname "$(find "$prefix/proton" -name 'libqpid-proton-core.so' | head -1)")
else
proton_dir="$work/proton"
lib=/usr/lib/$(gcc -print-multiarch)
version=$(pkg-config --modversion libqpid-proton)
cat > "$work/proton/ProtonConfig.cmake" <<CMAKE
set(Proton_VERSION $version)
set(Proton_FOUND TRUE)
set(Proton_INCLUDE_DIRS /usr/include)
set(Proton_LIBRARIES $lib/libqpid-proton.so)
set(Proton_Core_FOUND TRUE)
set(Proton_Core_INCLUDE_DIRS /usr/include)
set(Proton_Core_LIBRARIES $(ls "$lib"/libqpid-proton-core.so.* | head -1))
set(Proton_Proactor_FOUND TRUE)
set(Proton_Proactor_INCLUDE_DIRS /usr/include)
set(Proton_Proactor_LIBRARIES $(ls "$lib"/libqpid-proton-proactor.so.* | head -1))
CMAKE
cat > "$work/proton/ProtonConfigVersion.cmake" <<CMAKE
set(PACKAGE_VERSION $version)
set(PACKAGE_VERSION_COMPATIBLE TRUE)
CMAKE
fi

# A copy of the source without the subdirectories that need the console's npm build,
# Dispatch's test images or its docs toolchain.
cp -a "$src/." "$work/source/"
sed -i 's/^\( *\)add_subdirectory(\(tests\|docs\|console\))/\1# &/' "$work/source/CMakeLists.txt"

# Dispatch's CMakeLists writes config.sh into the directory cmake runs in: the build's.
cd "$work"
cmake -S "$work/source" -B "$work/cmake" -DProton_DIR="$proton_dir" \
  -DCMAKE_INSTALL_PREFIX="$prefix" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DPython_EXECUTABLE=/usr/bin/python3 -DUSE_LIBWEBSOCKETS=OFF -DQD_ENABLE_ASSERTIONS=OFF
cmake --build "$work/cmake" -j "$(nproc)"
cmake --install "$work/cmake"

pythonpath=$(find "$prefix" -path "$work" -prune -o -name 'qpid_dispatch-*.egg' -print | head -1)
if [ -z "$pythonpath" ]; then
  pythonpath=$(find "$prefix" -path "$work" -prune -o -path '*/qpid_dispatch/__init__.py' -print | head -1)
  pythonpath=$(dirname "$(dirname "$pythonpath")")
fi
for tool in qdrouterd:sbin qdstat:bin qdmanage:bin; do
  name=${tool%%:*}
  dir=${tool##*:}
  run="$prefix/$dir/$name"
  [ "$dir" = bin ] && run="\${PYTHON:-python3} $run"
  libs=""
  [ -n "$libpath" ] && libs="LD_LIBRARY_PATH=$libpath\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH} "
  printf '#!/bin/sh\n%sPYTHONPATH=%s${PYTHONPATH:+:$PYTHONPATH} exec %s "$@"\n' "$libs" "$pythonpath" "$run" > "$prefix/$name"
  chmod +x "$prefix/$name"
done
"$prefix/qdrouterd" --version
