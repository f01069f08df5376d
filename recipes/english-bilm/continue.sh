#!/usr/bin/env bash
# Continued runs of the default English biLM (elmo_hf.DEFAULT_MODEL): STEPS more steps of 64 sentences on the same
# mix, from a packaged float16 model taken from this clone's history (START_COMMIT, a commit: by default 5fbacbc, which
# shipped the first run), with a new AdamW state, 100 warm-up steps to LEARNING_RATE (1.5e-3) and a linear decay to 0,
# batches in the order that SEED (1) draws. The sixth run is where the seventh (recipes/english-bilm/train_gpu.sh with
# START_MODEL, on a GPU) started; the eighth continued the seventh, the ninth the eighth, the tenth the ninth, the
# eleventh the tenth, the twelfth the eleventh, the thirteenth the twelfth, the fourteenth the thirteenth, and the
# fifteenth, the shipped model's last, the fourteenth:
#
#     STEPS=4000 THREADS=2 bash recipes/english-bilm/continue.sh   # the second run: 38 minutes on two AMD EPYC threads
#     START_COMMIT=e164203 STEPS=5500 THREADS=2 LEARNING_RATE=1e-3 SEED=2 OUT=outputs/english-third-run \
#         bash recipes/english-bilm/continue.sh                   # the third run, from the second's model: 52 minutes
#     START_COMMIT=6b0df2d STEPS=6000 THREADS=2 LEARNING_RATE=1e-3 SEED=3 OUT=outputs/english-fourth-run \
#         bash recipes/english-bilm/continue.sh                   # the fourth run, from the third's model: 59 minutes
#     START_COMMIT=87d971c STEPS=6000 THREADS=2 LEARNING_RATE=1e-3 SEED=4 OUT=outputs/english-fifth-run \
#         bash recipes/english-bilm/continue.sh                   # the fifth run, from the fourth's model: 56 minutes
#     START_COMMIT=10273e8 STEPS=6000 THREADS=2 LEARNING_RATE=1e-3 SEED=5 OUT=outputs/english-sixth-run \
#         bash recipes/english-bilm/continue.sh                   # the sixth run, from the fifth's model: 57 minutes
#     START_COMMIT=a518936 STEPS=8000 THREADS=2 LEARNING_RATE=1e-3 SEED=6 OUT=outputs/english-eighth-run \
#         bash recipes/english-bilm/continue.sh                   # the eighth run, from the seventh's model: 59 minutes
#     START_COMMIT=042a086 STEPS=8000 THREADS=2 LEARNING_RATE=1e-3 SEED=7 OUT=training/english-ninth-run \
#         bash recipes/english-bilm/continue.sh                   # the ninth run, from the eighth's model: 62 minutes
#     START_COMMIT=9929160 STEPS=8000 THREADS=2 LEARNING_RATE=1e-3 SEED=8 OUT=training/english-tenth-run \
#         bash recipes/english-bilm/continue.sh                   # the tenth run, from the ninth's model: 63 minutes
#     START_COMMIT=b7d001e STEPS=16000 THREADS=2 LEARNING_RATE=1e-3 SEED=9 OUT=training/english-eleventh-run \
#         MINUTES=120 bash recipes/english-bilm/continue.sh       # the eleventh, from the tenth's: 177 minutes, resumed
#     START_COMMIT=9b633d7 STEPS=12000 THREADS=2 LEARNING_RATE=1e-3 SEED=10 OUT=training/english-twelfth-run \
#         MINUTES=100 bash recipes/english-bilm/continue.sh       # the twelfth, from the eleventh's: 148 minutes, resumed
#     START_COMMIT=9fa94b0 STEPS=12000 THREADS=2 LEARNING_RATE=1e-3 SEED=11 OUT=training/english-thirteenth-run \
#         MINUTES=100 bash recipes/english-bilm/continue.sh       # the thirteenth: 79 minutes on two Intel Xeon threads
#     python recipes/english-bilm/package.py training/english-thirteenth-run/run/checkpoint-12000 \
#         --num-sampled-negatives 1024 --output-dir elmo_hf/pretrained/elmo-english-small \
#         --evaluate test_subset=tests/data/english_test_subset.txt
#     START_COMMIT=5273362 STEPS=12000 THREADS=2 LEARNING_RATE=1e-3 SEED=12 OUT=training/english-fourteenth-run \
#         MINUTES=100 bash recipes/english-bilm/continue.sh       # the fourteenth: 123 minutes in two sessions, resumed
#     python recipes/english-bilm/package.py training/english-fourteenth-run/run/checkpoint-12000 \
#         --num-sampled-negatives 1024 --output-dir elmo_hf/pretrained/elmo-english-small \
#         --evaluate test_subset=tests/data/english_test_subset.txt
#     START_COMMIT=f9a36f0 STEPS=12000 THREADS=2 LEARNING_RATE=1e-3 SEED=13 OUT=training/english-fifteenth-run \
#         MINUTES=100 bash recipes/english-bilm/continue.sh       # the fifteenth: 105 minutes in two sessions, resumed
#     python recipes/english-bilm/package.py training/english-fifteenth-run/run/checkpoint-12000 \
#         --num-sampled-negatives 1024 --output-dir elmo_hf/pretrained/elmo-english-small \
#         --evaluate test_subset=tests/data/english_test_subset.txt
#     bash recipes/english-bilm/evaluate.sh outputs/eval-fifteenth-run   # what it was shipped on: about an hour
#
# STEPS (12000) sizes the run and its decay; THREADS (1) sets the threads, the same on every resume for bit-exact
# resumes. Run again after an interruption to continue from the last checkpoint in OUT (saved every 500 steps), on the
# same machine: training/ and outputs/ are git-ignored, and only the packaged model is committed.
set -euo pipefail
cd "$(dirname "$0")/../.."

START_COMMIT=${START_COMMIT:-5fbacbc} # the commit whose shipped model the run starts from
CORPUS=${CORPUS:-outputs/corpus}
OUT=${OUT:-outputs/english-second-run}
MINUTES=${MINUTES:-150}              # a safety stop only: the run is sized by steps
STEPS=${STEPS:-12000}                # the linear decay ends here
THREADS=${THREADS:-1}                # bit-exact resumes need the same count
LEARNING_RATE=${LEARNING_RATE:-1.5e-3}
SEED=${SEED:-1}

source recipes/english-bilm/steps.sh
write_default_mix "$CORPUS" lessreligious

start="$OUT/start"
mkdir -p "$start"
for file in config.json model.safetensors tokenizer_config.json vocab.txt; do
    git show "$START_COMMIT:elmo_hf/pretrained/elmo-english-small/$file" > "$start/$file"
done

resume_from_last "$OUT/run"
OMP_NUM_THREADS=$THREADS python examples/run_bilm_pretraining.py --model_name_or_path "$start" \
    --train_file outputs/default-bilm-mix/train.txt --output_dir "$OUT/run" --do_train \
    --max_words_per_sentence 80 --train_sampling_strategy group_by_length \
    --optim adamw_torch --learning_rate "$LEARNING_RATE" --weight_decay 0 --warmup_steps 100 --lr_scheduler_type linear \
    --max_steps "$STEPS" --per_device_train_batch_size 64 --max_grad_norm 1.0 \
    --save_strategy steps --save_steps 500 --save_total_limit 1 --logging_steps 50 --report_to none \
    --use_cpu --seed "$SEED" --max_train_minutes "$MINUTES" --disable_tqdm true "${resume[@]}"
