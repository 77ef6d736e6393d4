/* A hash map from addresses (or any nonzero 64-bit key) to pointers: how a
 * pool finds the block behind a pointer it is asked to free, and how the
 * trace recorder finds an allocation's id. Open addressing, linear probing,
 * deletion by backward shift (no tombstones). Not thread-safe: its owner
 * locks. */
#ifndef HX_MEM_PTRMAP_H
#define HX_MEM_PTRMAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct hx_ptrmap {
    uint64_t *keys; /* 0: empty */
    void **vals;
    size_t cap, n;  /* cap a power of two, 0 before the first put */
} hx_ptrmap;

/* Key 0 is not allowed. Returns false when out of host memory (map as it was). */
bool hx__ptrmap_put(hx_ptrmap *m, uint64_t key, void *val);
/* The value, or NULL. */
void *hx__ptrmap_get(const hx_ptrmap *m, uint64_t key);
/* Removes the key; returns its value (NULL if absent). */
void *hx__ptrmap_del(hx_ptrmap *m, uint64_t key);
void hx__ptrmap_free(hx_ptrmap *m);

#endif
