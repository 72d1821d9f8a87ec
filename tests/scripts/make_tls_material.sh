#!/usr/bin/env bash
# Certificates for the TLS tests, made with openssl into DIR (idempotent:
# a DIR/done younger than 7 days is kept, so a build tree makes them once
# and the 30-day certificates never expire under a test):
#   ca.pem                  the test CA
#   server.pem/-key.pem     signed by it, for 127.0.0.1 and localhost
#   client.pem/-key.pem     signed by it, for mutual TLS
#   expired.pem/-key.pem    signed by it, for 127.0.0.1, valid only in 2020
#   other-ca.pem            a CA that signed nothing here (a wrong CA)
# Keys are P-256: quick to make. faketime backdates the expired one.
set -euo pipefail
dir=$1
[ -n "$(find "$dir/done" -mtime -7 2>/dev/null)" ] && exit 0
rm -rf "$dir"
mkdir -p "$dir"
cd "$dir"
key() { openssl ecparam -name prime256v1 -genkey -noout -out "$1" 2>/dev/null; }
ca() {
  key "$1-key.pem"
  openssl req -x509 -new -key "$1-key.pem" -subj "/CN=pgoutbox test $1" -days 30 \
    -addext basicConstraints=critical,CA:TRUE -addext keyUsage=keyCertSign,cRLSign \
    -out "$1.pem" 2>/dev/null
}
# name, subject CN, extensions file content, days, [faketime date]
leaf() {
  key "$1-key.pem"
  openssl req -new -key "$1-key.pem" -subj "/CN=$2" -out "$1.csr" 2>/dev/null
  printf '%s\n' "$3" >"$1.ext"
  ${5:+faketime "$5"} openssl x509 -req -in "$1.csr" -CA ca.pem -CAkey ca-key.pem \
    -CAcreateserial -days "$4" -extfile "$1.ext" -out "$1.pem" 2>/dev/null
  rm -f "$1.csr" "$1.ext"
}
ca ca
ca other-ca
leaf server localhost "subjectAltName=IP:127.0.0.1,DNS:localhost
extendedKeyUsage=serverAuth" 30
leaf client outbox-relay "extendedKeyUsage=clientAuth" 30
leaf expired localhost "subjectAltName=IP:127.0.0.1,DNS:localhost
extendedKeyUsage=serverAuth" 1 "2020-01-01 00:00:00"
chmod 600 ./*-key.pem
touch done
