# The steps that recipes/english-bilm/train.sh and recipes/english-bilm/continue.sh share (sourced by both; run from the
# repository root).

# write_default_mix CORPUS MIX: builds the build-corpus corpus into CORPUS when absent (checked against the shipped
# manifest) and writes the mix MIX to outputs/default-bilm-mix.
write_default_mix() {
    if [ ! -f "$1/manifest.json" ]; then
        python recipes/english-bilm/build_corpus.py "$1" --expect
    fi
    python recipes/english-bilm/write_training_mix.py "$1" "$2" outputs/default-bilm-mix
}

# resume_from_last DIR: sets the array `resume` to the arguments that resume from DIR's last checkpoint-N (none when
# DIR has none).
resume_from_last() {
    resume=()
    local step
    step=$(ls -d "$1"/checkpoint-* 2>/dev/null | sed 's/.*checkpoint-//' | sort -n | tail -n 1 || true)
    if [ -n "$step" ]; then
        resume=(--resume_from_checkpoint "$1/checkpoint-$step")
        echo "resuming from $1/checkpoint-$step"
    fi
}
