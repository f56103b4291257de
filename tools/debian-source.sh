# Sourced by the scripts that take a dependency from Debian's own source packages (tools/build-static-zmq.sh,
# tools/fetch-httplib.sh). debian_source PACKAGE VERSION DIR unpacks that exact version into DIR/src, through a
# private sources list with a deb-src entry, so the machine's own apt configuration stays untouched.
debian_source() {
  local package=$1 version=$2 work=$3
  cat >"$work/sources.list" <<SRC
deb-src http://deb.debian.org/debian bookworm main
SRC
  local apt_opts=(-o "Dir::Etc::SourceList=$work/sources.list" -o Dir::Etc::SourceParts=/dev/null
                  -o "Dir::State::Lists=$work/lists" -o "Dir::Cache=$work/cache")
  mkdir -p "$work/lists/partial" "$work/cache/archives/partial"
  apt-get "${apt_opts[@]}" update -qq
  (cd "$work" && apt-get "${apt_opts[@]}" source --download-only "$package=$version" -qq)
  (cd "$work" && dpkg-source -x --no-check "${package}"_*.dsc src >/dev/null)
}
