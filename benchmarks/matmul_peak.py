"""One line: this machine's float32 matmul peak on one torch thread, as benchmarks/workloads.py
measures it (its matmul_peak). The shell benchmarks print it before and after their runs."""
import torch
from workloads import matmul_peak

if __name__ == "__main__":
    torch.set_num_threads(1)
    print(f"float32 matmul peak, one thread: {matmul_peak(torch.float32, (512, 1024), 10):.1f} GFLOP/s")
