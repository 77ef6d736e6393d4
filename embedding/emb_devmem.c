/* A cache's slots moved between host pages and a device's memory
 * (cache.h's hx_emb_devmem): a local table of the same shape made in the
 * other memory, the contents copied over; the host-page table is kept
 * while the slots are away, so that taking them back needs no memory. */
#include "embedding/embedding.h"

#include <stdio.h>
#include <string.h>

/* The params and state of a into b (same rows, dim, dtype; the state only
 * where both keep the same arrays: a failed change of optimizer may leave
 * them apart, and the slots are emptied by such a change anyway). */
static void copy_slots(const hx_emb_local *a, hx_emb_local *b)
{
    for (int i = 0; i < 3; i++)
        if (a->reg[i].bytes && a->reg[i].bytes == b->reg[i].bytes && (i == 0 || a->optim.kind == b->optim.kind))
            memcpy(b->reg[i].ptr, a->reg[i].ptr, a->reg[i].bytes);
    b->init = a->init;
    b->optim = a->optim.kind == b->optim.kind ? a->optim : b->optim;
}

hx_status hx_emb_devmem_move(hx_emb_local **slots, hx_emb_devmem *m, const hx_emb_mem *mem, hx_emb_err *err)
{
    hx_emb_local *cur = *slots;
    if (!mem) {
        if (!m->spare) return HX_OK;
        copy_slots(cur, m->spare);
        *slots = m->spare;
        m->spare = NULL;
        hx_emb_table_free(&cur->base); /* the device's blocks back to it */
        return HX_OK;
    }
    if (m->spare) return hx_emb_fail(err, HX_ERR_STATE, "embedding device cache: already in a device's memory");
    snprintf(m->what, sizeof m->what, "%s", mem->what ? mem->what : "an embedding device cache");
    hx_emb_mem dm = *mem;
    dm.what = m->what; /* kept by the new table: it must outlive the caller's string */
    hx_emb_table_config cc = hx_emb_table_config_default(cur->base.rows, cur->base.dim);
    cc.dtype = cur->dtype;
    cc.init = (hx_emb_init){HX_EMB_INIT_ZEROS, 0, 0, 0}; /* overwritten below */
    cc.huge_pages = 0;
    cc.optim = cur->optim;
    cc.oob = cur->oob;
    cc.row_stride = cur->row_stride;
    cc.row_offset = cur->row_offset;
    cc.mem = &dm;
    hx_emb_table *nt;
    hx_status st = hx_emb_local_create(&cc, &nt, err);
    if (st) return st;
    copy_slots(cur, hx_emb_as_local(nt));
    m->spare = cur;
    *slots = hx_emb_as_local(nt);
    return HX_OK;
}

hx_status hx_emb_devmem_set_optim(hx_emb_local *slots, hx_emb_devmem *m, const hx_emb_optim *o, hx_emb_err *err)
{
    hx_status st = hx_emb_local_set_optim(&slots->base, o, 1, err);
    return !st && m->spare ? hx_emb_local_set_optim(&m->spare->base, o, 1, err) : st;
}

void hx_emb_devmem_free(hx_emb_devmem *m)
{
    hx_emb_table_free(m->spare ? &m->spare->base : NULL);
    m->spare = NULL;
}
