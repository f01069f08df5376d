#!/usr/bin/env bash
# The tests that depend most on transformers, run against one transformers release in a fresh venv:
#   tools/transformers_matrix.sh TRANSFORMERS_VERSION [--sentence-transformers VERSION] [--spacy VERSION] [--keep]
# e.g. the lowest releases setup.py allows (docs/guarantees.md, "Supported releases", says which pass):
#   tools/transformers_matrix.sh 5.10.1 --sentence-transformers 6.2.0 --spacy 3.7.0
# A venv under ${TMPDIR:-/tmp} gets the local torch wheel (torch==2.13.0), that transformers, this checkout with its
# declared dependencies, and the few test dependencies these tests import; then it runs
#   - the parity tests against the original TensorFlow ELMo (tests/convert/test_parity.py), and what elmo_hf relies on in
#     transformers, device_map="auto" included (tests/model/test_transformers_contract.py),
#   - save_pretrained / from_pretrained and the Auto classes (tests/model/test_modeling.py),
#   - a task head's Trainer run (tests/training/test_heads_training.py), and gradient checkpointing, under the Trainer too
#     (tests/training/test_gradient_checkpointing.py),
#   - trust_remote_code loads in a process where elmo_hf cannot be imported (tests/convert/test_conversion.py, test_heads.py),
#   - with --sentence-transformers / --spacy: that release's integration tests (tests/integrations/test_integrations.py).
# The venv is removed afterwards unless --keep is given. Exit status: 0 when every test passed.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { echo "usage: $0 TRANSFORMERS_VERSION [--sentence-transformers VERSION] [--spacy VERSION] [--keep]" >&2; }
if [ $# -lt 1 ] || [[ "$1" == -* ]]; then
    usage
    exit 2
fi
transformers_version=$1
shift
sentence_transformers_version="" spacy_version="" keep=""
while [ $# -gt 0 ]; do
    case "$1" in
        --sentence-transformers) sentence_transformers_version=${2:?"error: --sentence-transformers needs a version"}; shift 2 ;;
        --spacy) spacy_version=${2:?"error: --spacy needs a version"}; shift 2 ;;
        --keep) keep=1; shift ;;
        *) echo "error: $1: unknown argument" >&2; usage; exit 2 ;;
    esac
done

work=$(mktemp -d "${TMPDIR:-/tmp}/elmo-matrix-transformers-$transformers_version.XXXX")
if [ -z "$keep" ]; then
    trap 'rm -rf "$work"' EXIT
fi
venv=$work/venv
# A copy of the checkout's files (a fresh clone's: no git-ignored ones), taken now: the package installs from it
# (building it writes nothing into the checkout) and its tests run, whatever happens to the checkout meanwhile.
git ls-files -z --cached --others --exclude-standard | while IFS= read -r -d '' path; do
    [ -e "$path" ] && printf '%s\0' "$path"
done | tar --null -T - -cf - | (mkdir "$work/package" && tar -xf - -C "$work/package")
python3 -m venv "$venv"
pip_install() {  # pip install, without the notes about this machine's empty local index folders
    "$venv/bin/python" -m pip install --quiet "$@" 2>&1 | { grep -v '^WARNING: Location' || true; }
}
versions() {
    "$venv/bin/python" -m pip list 2>/dev/null |
        grep -iE '^(torch|transformers|tokenizers|huggingface.hub|accelerate|safetensors|sentence.transformers|spacy|numpy) '
}
run_tests() {  # pytest ARGS..., on the copy's tests
    echo "+ pytest $*"
    # tests/conftest.py puts the copy first on sys.path, so the tests import its elmo_hf; the installed package
    # checks that setup.py's bounds resolve with these releases (and gives spaCy its entry point).
    (cd "$work/package" && CI=true HF_HUB_OFFLINE=1 OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} PYTHONPATH="$work/package" \
        "$venv/bin/python" -m pytest -q -p no:cacheprovider "$@")
}

echo "+ venv $venv: torch==2.13.0, transformers==$transformers_version, this checkout, the tests' dependencies"
pip_install torch==2.13.0  # the local CPU wheel (an unpinned torch would download a CUDA build)
pip_install "transformers==$transformers_version" "$work/package" pytest hypothesis h5py datasets "accelerate>=1.1"
versions
status=0
run_tests \
    tests/convert/test_parity.py \
    tests/model/test_transformers_contract.py \
    tests/model/test_modeling.py::test_save_and_load_round_trip_with_safetensors_only \
    tests/model/test_modeling.py::test_auto_classes \
    tests/training/test_heads_training.py::test_sequence_classifier_learns_negation \
    tests/training/test_gradient_checkpointing.py \
    tests/convert/test_conversion.py::test_trust_remote_code_without_the_package \
    tests/model/test_heads.py::test_round_trip_through_trust_remote_code_without_the_package || status=$?

# The integrations second, in the same venv without the Trainer test's datasets: spaCy 3.7 needs numpy 1, which the
# newest pyarrow and pandas (datasets' dependencies) refuse; a user of the integrations needs none of them.
integrations=() packages=()
if [ -n "$sentence_transformers_version" ]; then
    packages+=("sentence-transformers==$sentence_transformers_version")
    integrations+=(sentence_transformers)
fi
if [ -n "$spacy_version" ]; then
    packages+=("spacy==$spacy_version")
    integrations+=(spacy)
fi
if [ ${#integrations[@]} -gt 0 ]; then
    echo "+ venv: ${packages[*]}, without datasets"
    "$venv/bin/python" -m pip uninstall --quiet --yes datasets pyarrow pandas
    pip_install "transformers==$transformers_version" "${packages[@]}"
    versions
    run_tests tests/integrations/test_integrations.py -k "$(printf '%s or ' "${integrations[@]}" | sed 's/ or $//')" || status=$?
fi
exit $status
