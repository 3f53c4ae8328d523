#!/usr/bin/env bash
# Build librdkafka's own load generator, rdkafka_performance, for bench/peers.py.
#
# The source is the example Debian ships in librdkafka-dev (2.0.2 on bookworm); it is
# fetched with `apt-get download` at build time and never copied into this repo. It
# includes two private librdkafka headers (rd.h, rdtime.h): shim/ provides the handful of
# definitions it uses. At run time it needs librdkafka >= 2.x: it is linked (with an
# rpath) against the librdkafka bundled in the confluent-kafka wheel of the project venv.
#
# Also builds e2e_latency.c (ours) the same way.
#
# Output: bench/_tools/build/rdkafka_performance and e2e_latency (build/ is gitignored).
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
BUILD="$HERE/build"
PY="${PYTHON:-$ROOT/.venv/bin/python}"
OUT="$BUILD/rdkafka_performance"
mkdir -p "$BUILD"
cd "$BUILD"

src=deb/usr/share/doc/librdkafka-dev/examples/rdkafka_performance.c
if [ ! -f "$src" ]; then
    deb=$(ls librdkafka-dev_*.deb 2>/dev/null | head -1 || true)
    if [ -z "$deb" ]; then
        # _apt cannot write here; download as root without the sandbox warning mattering.
        apt-get download librdkafka-dev >/dev/null 2>&1 || { apt-get update -qq && apt-get download librdkafka-dev; }
        deb=$(ls librdkafka-dev_*.deb | head -1)
    fi
    dpkg-deb -x "$deb" deb
fi
command -v gcc >/dev/null || { apt-get install -y -qq gcc >/dev/null; }

# The example includes "../src/rd.h" and "rdkafka.h": lay out a tiny tree for it.
rm -rf tree && mkdir -p tree/src tree/examples
cp "$src" tree/examples/
cp deb/usr/include/librdkafka/rdkafka.h tree/src/
cp "$HERE/shim/rd.h" "$HERE/shim/rdtime.h" tree/src/

libdir=$("$PY" -c 'import confluent_kafka, os; d=os.path.dirname(confluent_kafka.__file__); print(os.path.join(os.path.dirname(d), "confluent_kafka.libs"))')
lib=$(ls "$libdir"/librdkafka*.so* | head -1)
gcc -O2 -w -I tree/src -o "$OUT.tmp" tree/examples/rdkafka_performance.c \
    "$lib" -Wl,-rpath,"$libdir" -lpthread
mv "$OUT.tmp" "$OUT"
# Our own fixed-rate end-to-end latency driver (public API only), same librdkafka.
gcc -O2 -Wall -I tree/src -o "$BUILD/e2e_latency.tmp" "$HERE/e2e_latency.c" \
    "$lib" -Wl,-rpath,"$libdir" -lpthread
mv "$BUILD/e2e_latency.tmp" "$BUILD/e2e_latency"
echo "$OUT (librdkafka $("$PY" -c 'import confluent_kafka; print(confluent_kafka.libversion()[0])') from $lib)"
