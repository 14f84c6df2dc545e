"""``torch_npu.contrib``: ``transfer_to_npu`` runs CUDA-written scripts on npu."""
