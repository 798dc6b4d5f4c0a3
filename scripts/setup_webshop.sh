#!/usr/bin/env bash
# Build princeton-nlp/WebShop's server for envs/webshop (WebShopEnv), stopping at the first failed step.
#
#   bash scripts/setup_webshop.sh [--data small|all] [--dir DIR] [--python PYTHON] [--skip-download]
#
# small: the 1,000-product set with synthetic goals (the SkillRise setting); all: every product (SKL-SD's
# R3L setting uses all products and human goals). Needs Python 3.8 (WebShop's pins have no wheels for newer
# Pythons; pyenv, conda or uv provide one), a Java runtime 11 or newer (pyserini's Lucene index), git and
# the internet (GitHub, PyPI, Google Drive for the data). It makes DIR (default ./webshop) a WebShop
# checkout at the commit below with its own virtualenv (DIR/.venv), the data, spaCy's models and the
# Lucene index, then checks that the index exists and that the site's modules import.
#
# What it does differently from WebShop's setup.sh, and why (docs/webshop_setup.md):
#   - pins Werkzeug 2.1.2 (Flask 2.1.2 does not pin it; Werkzeug 3 breaks Flask 2.1 at import: url_quote),
#     pydantic 1.8.2 with typing-extensions 4.5.0 (spaCy 3.3.0 fails at import with newer typing-extensions:
#     "issubclass() arg 1 must be a class"), and installs faiss-cpu from PyPI instead of conda;
#   - downloads en_core_web_sm too (web_agent_site/engine/goal.py loads it at import: the server would
#     not start without it);
#   - for --data all, points web_agent_site/utils.py's DEFAULT_FILE_PATH / DEFAULT_ATTR_PATH at the full
#     files (what WebShop's README step 6 asks for), so the site really loads every product;
#   - set -euo pipefail: a failed index build stops here, not at the first request.
set -euo pipefail

WEBSHOP_REPO=https://github.com/princeton-nlp/WebShop.git
WEBSHOP_COMMIT=64fa2a5c15c7daa698b9ac93f5bb5437b634c9bd
DATA=small
DIR=webshop
PYTHON=python3.8
DOWNLOAD=1

while [ $# -gt 0 ]; do
  case "$1" in
    --data) DATA="$2"; shift 2 ;;
    --dir) DIR="$2"; shift 2 ;;
    --python) PYTHON="$2"; shift 2 ;;
    --skip-download) DOWNLOAD=0; shift ;;  # data already in DIR/data (e.g. copied from another machine)
    *) echo "usage: $0 [--data small|all] [--dir DIR] [--python PYTHON] [--skip-download]" >&2; exit 2 ;;
  esac
done
case "$DATA" in small|all) ;; *) echo "--data must be small or all, got '$DATA'" >&2; exit 2 ;; esac

step() { echo "==> $*"; }

step "checking Python 3.8 ($PYTHON) and Java"
"$PYTHON" -c 'import sys; assert sys.version_info[:2] == (3, 8), sys.version' \
  || { echo "WebShop's pins need Python 3.8: pass --python /path/to/python3.8" >&2; exit 1; }
java -version >/dev/null 2>&1 || { echo "no java: install a Java runtime 11+ (e.g. openjdk-17-jre-headless)" >&2; exit 1; }

if [ ! -d "$DIR/.git" ]; then
  step "cloning WebShop into $DIR"
  git clone --quiet "$WEBSHOP_REPO" "$DIR"
fi
git -C "$DIR" checkout --quiet "$WEBSHOP_COMMIT"
cd "$DIR"

step "installing WebShop's requirements with pins that import (.venv)"
"$PYTHON" -m venv .venv
. .venv/bin/activate
pip install --quiet --upgrade pip
cat > skl_constraints.txt <<'EOF'
Werkzeug==2.1.2
pydantic==1.8.2
typing-extensions==4.5.0
EOF
pip install --quiet -r requirements.txt -c skl_constraints.txt faiss-cpu==1.7.4

if [ "$DOWNLOAD" = 1 ]; then
  step "downloading the $DATA product set and the human goals (Google Drive)"
  mkdir -p data
  (
    cd data
    if [ "$DATA" = small ]; then
      gdown --quiet 1EgHdxQ_YxqIQlvvq5iKlCrkEKR6-j0Ib  # items_shuffle_1000.json
      gdown --quiet 1IduG0xl544V_A_jv3tHXC0kyFi7PnyBu  # items_ins_v2_1000.json
    else
      gdown --quiet 1A2whVgOO0euk5O13n2iYDM0bQRkkRduB  # items_shuffle.json
      gdown --quiet 1s2j6NgHljiZzQNL3veZaAiyW_qDEgBNi  # items_ins_v2.json
    fi
    gdown --quiet 14Kb5SPBk_jfdLZ_CDBNitW98QLDlKR5O    # items_human_ins.json
  )
  step "downloading spaCy's en_core_web_lg and en_core_web_sm"
  python -m spacy download en_core_web_lg >/dev/null
  python -m spacy download en_core_web_sm >/dev/null
fi

if [ "$DATA" = all ]; then
  products=data/items_shuffle.json attributes=data/items_ins_v2.json
else
  products=data/items_shuffle_1000.json attributes=data/items_ins_v2_1000.json
fi
for file in "$products" "$attributes" data/items_human_ins.json; do
  [ -s "$file" ] || { echo "missing $DIR/$file: the download did not complete" >&2; exit 1; }
done
step "pointing web_agent_site/utils.py at $products"
sed -i -E "s#^DEFAULT_ATTR_PATH = .*#DEFAULT_ATTR_PATH = join(BASE_DIR, '../$attributes')#; \
           s#^DEFAULT_FILE_PATH = .*#DEFAULT_FILE_PATH = join(BASE_DIR, '../$products')#" web_agent_site/utils.py

step "building the Lucene index"
(
  cd search_engine
  mkdir -p resources resources_100 resources_1k resources_100k indexes
  python convert_product_file_format.py
  bash run_indexing.sh
)
index=search_engine/indexes_1k
[ "$DATA" = all ] && index=search_engine/indexes
ls "$index"/segments_* >/dev/null 2>&1 || { echo "no Lucene index in $DIR/$index: the index build failed" >&2; exit 1; }

step "checking that the site imports and its index opens"
python - "$index" <<'EOF'
import sys
import web_agent_site.app  # noqa: F401  (Flask, spaCy with en_core_web_sm, the goal and engine modules)
from pyserini.search.lucene import LuceneSearcher
hits = LuceneSearcher(sys.argv[1]).search("shoes", k=3)
print(f"index {sys.argv[1]}: a search for 'shoes' finds {len(hits)} products")
EOF
step "done. Start the server as docs/webshop_setup.md section 2 says (in $DIR, with $DIR/.venv active)"
