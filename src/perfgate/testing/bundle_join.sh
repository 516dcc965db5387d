#!/usr/bin/env bash
# Join the bundle's chunks, verify every sha256, unpack, and check that SGLang imports.
#   bash join.sh [STAGE_DIR]   (default: the directory of this script)
# STAGE_DIR must hold this script, SHA256SUMS, env.sh and every chunk named in SHA256SUMS.
# Exit 0 when the bundle is unpacked and imports; 3 for a missing or corrupted chunk; 4 when
# the unpacked tree does not import. An unpacked tree of the same archive is reused.
set -uo pipefail
STAGE=${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)}
cd "$STAGE" || { echo "join: cannot enter $STAGE"; exit 3; }
[ -f SHA256SUMS ] || { echo "join: no SHA256SUMS in $STAGE: copy chunk 1's folder there"; exit 3; }
ARCHIVE=@ARCHIVE@
bad=0
while read -r sum name; do
    [ "$name" = "$ARCHIVE" ] && continue
    if [ ! -f "$name" ]; then
        echo "join: chunk $name is missing from $STAGE: send it again"; bad=1; continue
    fi
    if [ "$(sha256sum "$name" | cut -d' ' -f1)" != "$sum" ]; then
        echo "join: chunk $name is corrupted (sha256 differs from SHA256SUMS): send it again"; bad=1
    fi
done < SHA256SUMS
[ "$bad" = 0 ] || exit 3
want=$(awk -v a="$ARCHIVE" '$2 == a {print $1}' SHA256SUMS)
if [ -f site/.joined ] && [ "$(cat site/.joined)" = "$want" ]; then
    echo "join: site/ already unpacked from $ARCHIVE ($want)"
else
    rm -rf site site.tmp && mkdir site.tmp || exit 3
    cat $(awk -v a="$ARCHIVE" '$2 != a {print $2}' SHA256SUMS) > "$ARCHIVE" || { echo "join: cannot write $STAGE/$ARCHIVE (disk full?)"; exit 3; }
    if [ "$(sha256sum "$ARCHIVE" | cut -d' ' -f1)" != "$want" ]; then
        echo "join: the joined $ARCHIVE does not match SHA256SUMS: send the chunks again"; rm -f "$ARCHIVE"; exit 3
    fi
    xz -dc "$ARCHIVE" | tar -C site.tmp -xf - || { echo "join: unpacking $ARCHIVE failed (disk full?)"; exit 3; }
    mv site.tmp/site site && rmdir site.tmp && rm -f "$ARCHIVE" && echo "$want" > site/.joined || exit 3
    echo "join: unpacked $ARCHIVE into $STAGE/site ($(du -sm site | cut -f1) MiB)"
fi
source ./env.sh
${PYTHON:-python3} -c "
import importlib.metadata as md, torch, transformers, sgl_kernel, sglang.launch_server, sglang.srt.server_args
print('join: imports ok: sglang', md.version('sglang'), '| sglang-kernel', md.version('sglang-kernel'), '| torch', torch.__version__, '| transformers', transformers.__version__, '| cuda', torch.cuda.is_available())
" || { echo "join: the bundle does not import on this host (traceback above)"; exit 4; }
