/* hetex gpt --zero S: data parallel over mpirun's ranks. Each rank trains
 * on its rows of the global batch (--batch / ranks of them; every rank
 * draws the whole batch from the one stream a lone run draws from, so
 * that a checkpoint resumes at any rank count); the session sums the
 * gradients over the ranks (ZeRO stage 0), shards the optimizer state
 * over them (1), the summed gradients too (2), and the 16-bit parameters
 * too (3: gathered chunk by chunk for the forward and the backward; with
 * an accelerator it needs --offload-config offload_param=cpu). Each rank
 * reports its model-state memory against the ZeRO paper's formula and the
 * bytes it sends per step against the minimum. */
#include "gpt.h"
#include "cli/cli.h"

#include <stdio.h>

int gpt_zero_start(int stage, int global_batch, hx_comm **comm, int *local_batch)
{
    *comm = NULL;
    if (hx_comm_create(NULL, comm)) {
        cli_error("gpt", "--zero", hx_last_error());
        return 1;
    }
    int n = hx_comm_size(*comm);
    if (global_batch % n) {
        fprintf(stderr, "hetex gpt: --batch %d is the global batch: it must be a multiple of the "
                "%d ranks\n", global_batch, n);
        hx_comm_free(*comm);
        *comm = NULL;
        return 2;
    }
    *local_batch = global_batch / n;
    return 0;
}

/* Model states per rank: parameters, f32 masters and Adam's moments
 * (persistent, the device's and the host's each printed, or in the disk
 * tier with offload_param=disk: at stages 1-3 only this rank's shard of
 * masters and moments, at 3 of the 16-bit parameters too) and the
 * gradients (2 bytes each in bf16/f16, 4 in f32; at stages 2 and 3 the
 * rank's own chunks of them), against the ZeRO formula of the stage. */
void gpt_zero_print_memory(hx_session *s, const gpt_model *m, hx_comm *comm, int stage, hx_dtype dt)
{
    hx_memory_stats ms;
    if (hx_session_memory_stats(s, &ms)) return;
    double psi = (double)m->n_params, n = hx_comm_size(comm), mib = 1.0 / (1 << 20);
    double grads = stage >= 2 ? (double)ms.zero_grad_shard_bytes : psi * (double)hx_dtype_size(dt);
    double persistent = (double)(ms.persistent_bytes + ms.device_persistent_bytes);
    double disk = (double)ms.disk_persistent_bytes;
    double states = persistent + disk + grads;
    double formula[4] = {16 * psi, 4 * psi + 12 * psi / n, 2 * psi + 14 * psi / n, 16 * psi / n};
    char on_disk[64] = "";
    if (disk > 0) snprintf(on_disk, sizeof on_disk, ", %.2f MiB in the disk tier", disk * mib);
    printf("zero: rank %d of %.0f: model states %.2f MiB = %.2f bytes/param (persistent %.2f MiB: "
           "%.2f on the device, %.2f on the host%s; %s gradients %.2f MiB), ZeRO stage %d formula %.2f MiB (%.2f "
           "bytes/param): ratio %.3f; the other stages at %.0f ranks: 16 %.2f, 4+12/N %.2f, "
           "2+14/N %.2f, 16/N %.2f MiB; sharded optimizer state here %.2f of %.2f MiB; plus the "
           "host chunks the ranks sum the gradients in: %.2f MiB\n",
           hx_comm_rank(comm), n, states * mib, states / psi, persistent * mib,
           ms.device_persistent_bytes * mib, ms.persistent_bytes * mib, on_disk, hx_dtype_name(dt),
           grads * mib, stage, formula[stage] * mib, formula[stage] / psi, states / formula[stage],
           n, formula[0] * mib, formula[1] * mib, formula[2] * mib, formula[3] * mib,
           ms.zero_owned_bytes * mib, ms.zero_sharded_bytes * mib, ms.dp_chunk_bytes * mib);
}

void gpt_zero_print_gathered(hx_session *s, hx_comm *comm)
{
    hx_memory_stats ms;
    if (hx_session_memory_stats(s, &ms)) return;
    double mib = 1.0 / (1 << 20);
    printf("zero: rank %d: gathered parameters (transient host buffers) at most %.3f MiB at once, "
           "%.3f MiB predicted (the plans' steps in order at the prefetch depth)\n",
           hx_comm_rank(comm), ms.zero_gather_peak_bytes * mib, ms.zero_gather_planned_bytes * mib);
}

/* Bytes sent per step against the minimum: stages 0-2 a ring all-reduce
 * of the gradients, 2(N-1)/N of their bytes (= a reduce-scatter of the
 * gradients and an all-gather of the 16-bit parameters); stage 3 3(N-1)/N
 * (a reduce-scatter of the gradients and two all-gathers of the 16-bit
 * parameters, for the forward and for the backward). */
void gpt_zero_print_comm(const gpt_model *m, hx_comm *comm, hx_dtype dt, int stage, uint64_t sent,
                         int steps)
{
    if (steps <= 0) return;
    double n = hx_comm_size(comm), per_step = (double)sent / steps;
    double grads = (double)m->n_params * (double)hx_dtype_size(dt);
    double minimum = (stage == 3 ? 3 : 2) * (n - 1) / n * grads;
    printf("zero: rank %d sent %.0f bytes per step (all steps: %llu); the minimum, %s of the %.0f "
           "bytes of gradients, sends %.0f: ratio %.3f\n", hx_comm_rank(comm), per_step,
           (unsigned long long)sent,
           stage == 3 ? "a reduce-scatter and two all-gathers (forward, backward) the size"
                      : "a ring all-reduce",
           grads, minimum, minimum > 0 ? per_step / minimum : 0.0);
    if (stage == 3)
        printf("zero: rank %d: at stage 3 the evaluations' and --sample's runs gather the "
               "parameters too: their bytes are in the figure above (--sample 0 and a larger "
               "--eval-every leave fewer)\n", hx_comm_rank(comm));
}
