#!/usr/bin/env bash
# Installs the Debian packages the project needs on a fresh machine:
# headers and pkg-config to build python-qpid-proton with OpenSSL and Cyrus SASL (its build
# silently drops either one whose pkg-config lookup fails), Cyrus's PLAIN/ANONYMOUS plugins and
# saslpasswd2 (tests make user databases with it), the openssl command (TLS tests make
# throwaway certificates with it), Proton's C examples for the benchmark,
# Node.js for the rhea interoperability tests, RabbitMQ as the real AMQP 1.0 broker of the
# link-route tests (Debian's ActiveMQ lacks its AMQP transport), a Java 17 runtime for Spark
# (the telemetry pipeline, pipeline/; pyspark 4 needs Java 17 or later), Chromium and its
# WebDriver for the console's browser tests (tests/test_console_browser.py, headless). Does
# nothing when all are there.
set -euo pipefail

packages=(gcc make pkgconf libssl-dev openssl libsasl2-dev libsasl2-modules sasl2-bin
          libqpid-proton11-dev libqpid-proton11-dev-examples rabbitmq-server
          openjdk-17-jre-headless chromium chromium-driver)
command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || packages+=(nodejs npm)

missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
echo "installing Debian packages: ${missing[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
