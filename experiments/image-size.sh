#!/usr/bin/env bash
# The container image's size where no container registry can be reached (so neither
# the Dockerfile's build stage nor its distroless base can be pulled): an image made
# from scratch with what the Dockerfile's final stage carries of its own — the stripped
# release binary, the shared libraries it links (as `ldd` finds them) and the system's
# CA bundle — run as user 65532. The distroless base adds little beyond these (tzdata,
# /etc/passwd, a few MB).
#
# Needs root and buildah (`apt-get install buildah`). Build the binary first:
#   CARGO_PROFILE_RELEASE_DEBUG=none CARGO_PROFILE_RELEASE_STRIP=symbols \
#     cargo build --release --locked -p fleetsync --bin fleetsync
# then: bash experiments/image-size.sh [path/to/fleetsync]
set -euo pipefail
bin=${1:-target/release/fleetsync}
[ -x "$bin" ] || { echo "no binary at $bin (build it first)" >&2; exit 1; }
ctr=$(buildah from scratch)
trap 'buildah rm "$ctr" >/dev/null' EXIT
buildah copy --quiet "$ctr" "$bin" /usr/local/bin/fleetsync >/dev/null
for lib in $(ldd "$bin" | grep -o '/[^ ]*'); do
    buildah copy --quiet "$ctr" "$(readlink -f "$lib")" "$lib" >/dev/null
done
buildah copy --quiet "$ctr" /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt >/dev/null
buildah config --user 65532:65532 --entrypoint '["/usr/local/bin/fleetsync"]' --cmd 'serve --listen 0.0.0.0:8080' "$ctr"
buildah commit --quiet "$ctr" localhost/fleetsync:measure >/dev/null
echo "binary:  $(du -h "$bin" | cut -f1) ($(stat -c %s "$bin") bytes)"
echo "libraries: $(ldd "$bin" | grep -o '/[^ ]*' | xargs -r readlink -f | xargs -r du -ch | tail -1 | cut -f1)"
echo "image:   $(buildah images --format '{{.Size}}' localhost/fleetsync:measure)"
