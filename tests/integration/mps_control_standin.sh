#!/bin/sh
# Test fixture: stands in for `nvidia-cuda-mps-control -f` on machines without NVIDIA MPS. It records how the
# backend started it and creates the control pipe the backend waits for. No process can become an MPS client
# through it (the emulated driver has no MPS), which is what the refusal test needs.
[ "$1" = "-f" ] || exit 2
[ -n "$CUDA_MPS_PIPE_DIRECTORY" ] && [ -n "$CUDA_MPS_LOG_DIRECTORY" ] || exit 3
echo "started -f pipe=$CUDA_MPS_PIPE_DIRECTORY" >> "$CUDA_MPS_LOG_DIRECTORY/standin.log"
mkfifo "$CUDA_MPS_PIPE_DIRECTORY/control" || exit 1
exec sleep 600
