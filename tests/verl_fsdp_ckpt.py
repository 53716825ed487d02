"""Write a 2-rank FSDP2 checkpoint of an HF model in verl's layout, on CPU with gloo (run by
tests/test_verl_lane.py under ``torchrun --nproc_per_node 2``)::

    <out>/model_world_size_2_rank_{0,1}.pt   sharded state dicts (DTensor shards, as verl's FSDP2 saves them)
    <out>/fsdp_config.json                   {"FSDP_version": 2, "world_size": 2}
    <out>/huggingface/                       config + tokenizer (what the merger builds the model from)

verl's own checkpoint manager needs CUDA, so this writes the same files with FSDP2's
``fully_shard`` and ``get_model_state_dict(full_state_dict=False)`` directly.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from transformers import AutoModelForCausalLM, AutoTokenizer


def main(src: str, out: str) -> None:
    dist.init_process_group("gloo")
    rank, ws = dist.get_rank(), dist.get_world_size()
    torch.set_num_threads(1)
    mesh = init_device_mesh("cpu", (ws,), mesh_dim_names=("fsdp",))
    model = AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32)
    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    sd = get_model_state_dict(model, options=StateDictOptions(full_state_dict=False, cpu_offload=True))
    d = Path(out)
    d.mkdir(parents=True, exist_ok=True)
    torch.save(sd, d / f"model_world_size_{ws}_rank_{rank}.pt")
    if rank == 0:
        (d / "fsdp_config.json").write_text(json.dumps({"FSDP_version": 2, "world_size": ws}))
        model.config.save_pretrained(d / "huggingface")
        AutoTokenizer.from_pretrained(src).save_pretrained(d / "huggingface")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
