/* CPU launchers of the embedding ops (host tables): lookup, bag, the
 * gradient of a bag's per-sample weights and the tables' sparse update
 * nodes. */
#ifndef HX_BACKEND_CPU_EMBEDDING_H
#define HX_BACKEND_CPU_EMBEDDING_H

#include "backend/launch.h"

hx_status hx__cpu_embedding_lookup(const hx_exec *ex, const hx_tensor *y, void *out,
                                   void *const *in);
hx_status hx__cpu_embedding_bag(const hx_exec *ex, const hx_tensor *y, void *out,
                                void *const *in);
/* in: dy (bags, dim), ids, offsets; out: d loss / d per-sample weights (n). */
hx_status hx__cpu_embedding_bag_weights_backward(const hx_exec *ex, const hx_tensor *y, void *out,
                                                 void *const *in);
hx_status hx__cpu_embedding_update(const hx_exec *ex, const hx_tensor *y, void *out,
                                   void *const *in);

#endif
