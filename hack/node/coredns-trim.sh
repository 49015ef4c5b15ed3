# CoreDNS as its docs say to trim it, in one place for hack/node/build.sh and hack/go-dwarf-ab.sh
# (sourced by both): its plugin.cfg without the plugins that bring the heaviest dependencies and
# that no Corefile here uses (cloud DNS backends, GeoIP, tracing, etcd, Nomad), then `go
# generate`'s directives step, in a writable copy of the module.
COREDNS_VERSION=${COREDNS_VERSION:-1.14.7}
COREDNS_DROPPED=(geoip trace route53 azure clouddns etcd nomad)

coredns_trim() {  # coredns_trim MODULE_DIR COPY_DIR: the trimmed source in COPY_DIR, ready to build
  local from=$1 to=$2 drop
  drop=$(IFS='|'; echo "${COREDNS_DROPPED[*]}")
  rm -rf "$to" && cp -r "$from" "$to" && chmod -R u+w "$to"
  grep -vE "^($drop):" "$from/plugin.cfg" > "$to/plugin.cfg"
  (cd "$to" && GOFLAGS=-mod=mod go run directives_generate.go)
}
