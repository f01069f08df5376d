#!/usr/bin/env bash
# Trains the default English biLM from scratch on the registry-package corpus, or resumes it exactly where it stopped.
# The run's state is training/elmo-english-small/checkpoint-N (weights, optimiser, scheduler, random states and
# vocab.txt; git-ignored, like everything under training/ and outputs/):
#
#     MINUTES=60 bash recipes/english-bilm/train.sh       # trains for at most MINUTES, then saves and exits
#
# The corpus is rebuilt when absent and checked against corpus_manifest.json (beside this script), so the batches
# after a resume are the ones an uninterrupted run would have drawn. Once the run reaches MAX_STEPS, package the
# model (package.py) and commit only the packaged model.
set -euo pipefail
cd "$(dirname "$0")/../.."

MINUTES=${MINUTES:-60}
MAX_STEPS=${MAX_STEPS:-8000}           # the linear decay ends here; the card's from-scratch command sets 134000
MIX=${MIX:-lessreligious}           # a mix of build_corpus.MIXES
CORPUS=${CORPUS:-outputs/corpus}
STATE=training/elmo-english-small
THREADS=${THREADS:-1}              # bit-exact resumes need the same count

source recipes/english-bilm/steps.sh
write_default_mix "$CORPUS" "$MIX"
resume_from_last "$STATE"
OMP_NUM_THREADS=$THREADS python examples/run_bilm_pretraining.py \
    --train_file outputs/default-bilm-mix/train.txt --output_dir "$STATE" --do_train \
    --filters small --num_highway_layers 1 --max_characters_per_token 50 --lstm_dim 512 --projection_dim 192 \
    --num_lstm_layers 2 --num_sampled_negatives 1024 --pretraining_dropout 0.15 --max_vocab_size 20000 \
    --max_words_per_sentence 80 --train_sampling_strategy group_by_length \
    --optim adamw_torch --learning_rate 3e-3 --weight_decay 0 --warmup_steps 200 --lr_scheduler_type linear \
    --max_steps "$MAX_STEPS" --per_device_train_batch_size 64 --max_grad_norm 1.0 \
    --save_strategy steps --save_steps 250 --save_total_limit 1 --logging_steps 50 --report_to none \
    --use_cpu --seed 0 --max_train_minutes "$MINUTES" "${resume[@]}"
