#!/usr/bin/env bash
# Test double for verl's tests/special_e2e/run_ppo_trainer_megatron.sh: the same variables with the
# same defaults, traced by `set -x` the same way, and the same trainer command line. The trainer it
# starts is the double in verl/trainer/main_ppo.py.
set -xeuo pipefail

NUM_GPUS=${NUM_GPUS:-8}
ENGINE=${ENGINE:-vllm}
MODEL_ID=${MODEL_ID:-Qwen/Qwen2.5-0.5B}
MODEL_PATH=${MODEL_PATH:-${HOME}/models/${MODEL_ID}}
USE_DUMMY_MODEL=${USE_DUMMY_MODEL:-False}
TRAIN_FILES=${TRAIN_FILES:-${HOME}/data/gsm8k/train.parquet}
VAL_FILES=${VAL_FILES:-${HOME}/data/gsm8k/test.parquet}
RM_MODEL_PATH=${RM_MODEL_PATH:-${HOME}/models/Skywork/Skywork-Reward-V2-Llama-3.2-1B}
VAL_BEFORE_TRAIN=${VAL_BEFORE_TRAIN:-False}
TEST_FREQ=${TEST_FREQ:--1}
RESUME_MODE=${RESUME_MODE:-disable}
SAVE_FREQ=${SAVE_FREQ:--1}
TOTAL_TRAIN_STEPS=${TOTAL_TRAIN_STEPS:-1}
LORA_RANK=${LORA_RANK:-0}
COMMON_PP=${COMMON_PP:-2}
COMMON_VPP=${COMMON_VPP:-2}
COMMON_CP=${COMMON_CP:-2}
COMMON_TP=${COMMON_TP:-2}
COMMON_EP=${COMMON_EP:-1}
INFER_TP=${INFER_TP:-$COMMON_TP}
ALL_OFFLOAD=${ALL_OFFLOAD:-True}
USE_MBRIDGE=${USE_MBRIDGE:-True}
VANILLA_MBRIDGE=${VANILLA_MBRIDGE:-False}
VALUE_VANILLA_MBRIDGE=${VALUE_VANILLA_MBRIDGE:-$VANILLA_MBRIDGE}
USE_MEGATRON_FSDP=${USE_MEGATRON_FSDP:-False}
export CUDA_DEVICE_MAX_CONNECTIONS=1

exp_name="$(basename "${MODEL_ID,,}")-megatron-gsm8k-minimal"

python3 -m verl.trainer.main_ppo --config-path=config --config-name=ppo_megatron_trainer.yaml \
    data.train_files="${TRAIN_FILES}" data.val_files="${VAL_FILES}" \
    actor_rollout_ref.model.path="${MODEL_PATH}" \
    trainer.logger=console trainer.project_name='verl-test' trainer.experiment_name="${exp_name}" \
    trainer.n_gpus_per_node="${NUM_GPUS}" trainer.total_training_steps="${TOTAL_TRAIN_STEPS}" \
    trainer.save_freq="${SAVE_FREQ}" trainer.resume_mode="${RESUME_MODE}" \
    trainer.val_before_train="${VAL_BEFORE_TRAIN}" trainer.test_freq="${TEST_FREQ}" \
    reward.reward_model.enable=True actor_rollout_ref.rollout.name="${ENGINE}" "$@"
