/* Server mode's state and messages, shared by embedding/ps*.c only. A
 * worker's request is a ps_req followed by n local ids (as the servers'
 * shard places them; a DYNAMIC table's keys) and, for a push, n gradient
 * rows of dim floats (a pull with counts: n occurrence counts; a save: n
 * bytes of the checkpoint's path, no NUL; a store: n records of `rec`
 * bytes, rows with their optimizer state as hx_emb_local_pack_row lays
 * them out, from a worker's device cache, which a fetch reads); a
 * server's reply a ps_reply followed by n x width floats, or msglen bytes
 * of an error message. Requests go with tag PS_TAG_REQ, so a worker's
 * requests reach a server in the order sent; replies of table i with tag
 * PS_TAG_REPLY + i, so threads working on different tables each wait for
 * their own. A table's creation ends with the servers' verdict (tag
 * PS_TAG_CREATE, from server 0 to each worker: a ps_reply whose seq is
 * the table's index, and the message of a refusal). */
#ifndef HX_EMBEDDING_PS_IMPL_H
#define HX_EMBEDDING_PS_IMPL_H

#include "embedding/ps.h"
#include "embedding/shard_impl.h"
#include "embedding/hot.h"
#include "dist/dist.h"

#include <pthread.h>

enum { PS_TAG_REQ = 1, PS_TAG_CREATE = 2, PS_TAG_REPLY = 16, PS_MAX_TABLES = 16000 };
enum { PS_PULL = 1, PS_PUSH, PS_FINISH, PS_SAVE, PS_FETCH, PS_STORE, PS_ALIVE };

typedef struct ps_req {
    int64_t kind, table;
    int64_t hash;     /* the table's configuration, as the worker created it */
    int64_t seq;      /* the worker's request number, echoed by the reply */
    int64_t step;     /* push: its step (0, 1, ...); pull, save: the worker's pushes so far */
    int64_t need;     /* pull, save: the steps that must be applied first */
    int64_t n;        /* ids (save: bytes of the path) */
    int64_t k;        /* pull: HX_EMB_SHARD_ROWS, or an optimizer state array */
    int64_t train;    /* pull: a training lookup */
    int64_t optim;    /* push: the worker's optimizer kind */
    int64_t optstep;  /* push: the optimizer's t */
    int64_t qstep;    /* pull: the query's step (a DYNAMIC map's clock) */
    int64_t tpull;    /* a DYNAMIC table's training pull: this worker's count of them
                         before it (the servers answer the workers' k-th ones together);
                         else -1 */
    int64_t counts;   /* 1: n occurrence counts follow the ids (a frequency filter) */
    int64_t vers;     /* 1: n versions follow the ids (a worker's cache: the servers'
                         applied steps when it got each row, -1 none) */
    int64_t rec;      /* fetch, store: bytes of a row's record (params and state) */
} ps_req;

/* A versioned pull's reply: n flags (1: the row follows; 0: the worker's
 * copy is current), padded to 8 bytes, then `rows` rows. A fetch's: n
 * flags (1: the record follows; 0: a lazy row never written), padded to
 * 8 bytes, then `rows` records of `width` bytes. */
typedef struct ps_reply {
    int64_t status, seq, applied, n, width, msglen;
    int64_t rows;     /* rows that follow (n, unless the pull was versioned) */
} ps_reply;

/* A push waiting for its step's other pushes (the message holds it). */
typedef struct ps_push {
    hx_msg m;
    const ps_req *h;
    struct ps_push *next;
} ps_push;

/* A pull (or a save) waiting for the steps it needs; a DYNAMIC table's
 * training pull waiting for the other workers' of its index. */
typedef struct ps_pull {
    hx_msg m;
    struct ps_pull *next;
} ps_pull;

/* A registered table, on either role. */
typedef struct ps_entry {
    char name[64];
    uint64_t hash;
    hx_emb_table *impl;   /* the worker's hx_emb_ps or the server's shard; NULL once freed */
    hx_emb_shard *shard;  /* server */
    /* server, while serving */
    int64_t applied;      /* steps applied */
    ps_push **head, **tail; /* per worker, in step order */
    ps_pull *pulls;       /* and saves */
    ps_pull **thead, **ttail; /* per worker: a DYNAMIC table's training pulls, in order */
    hx_emb_workspace *ws;
    int64_t *ver;         /* server, a fixed table: per local row, the steps its value includes
                             since it last changed (a push applied, or a write-back of a cache
                             of hot rows: the steps its worker said; 0: never) */
    int cached_by;        /* server: the worker whose device cache holds rows of it
                             (it fetched, stored or said it lives), else -1 */
} ps_entry;

struct hx_ps {
    hx_mailbox *mb;       /* every rank */
    hx_comm *role;        /* the workers' or the servers' communicator */
    int rank, size, S, W, index; /* servers are ranks W .. W + S - 1 */
    bool server, served, finished;
    int staleness;
    double timeout_s;
    hx_emb_budget held;   /* a server's tables' bytes, capped at rank_bytes */
    size_t rank_bytes;
    int64_t cache_rows;   /* a worker's cache of each fixed table (hx_ps_config) */
    pthread_mutex_t lock; /* the registry and the stats */
    ps_entry **tables;
    int n_tables, cap;
    hx_ps_stats stats;
};

/* A worker's table. */
struct hx_emb_ps {
    hx_emb_table base;
    hx_ps *ps;
    int index;
    uint64_t hash;
    hx_emb_shard route;   /* placement over the servers only (hx__shard_init_place) */
    char name[64];
    int64_t pushes, seq;
    int64_t tpulls;       /* DYNAMIC: training pulls sent */
    struct ps_cache *cache; /* pulled rows kept (hx_ps_config.cache_rows), or NULL */
    hx_emb_table *dev;    /* the device cache in front of it (device_cache_rows, one worker), or NULL */
    hx_emb_hot *hot;      /* its hot rows replicated on every worker (device_cache_rows, several
                             workers: ps_hot.c), or NULL */
    double sent_at;       /* when it last sent the servers anything (a device cache's heartbeat) */
    pthread_mutex_t lock; /* one request at a time */
    _Atomic int64_t oob_count;
};

/* A worker's table (embedding/ps_client.c) of sc's layout over the
 * servers; NULL when out of memory. */
hx_emb_table *hx__ps_client_create(hx_ps *ps, const hx_emb_shard_config *sc, const char *name,
                                   uint64_t hash, int index);
/* A worker's cache of pulled rows (embedding/ps_cache.c): up to `rows`
 * rows of dim floats, 2-way set associative, the less used of a set
 * replaced (counts halved as they are passed over). */
typedef struct ps_cache ps_cache;
ps_cache *hx__ps_cache_create(int64_t rows, int64_t dim);
void hx__ps_cache_free(ps_cache *c);
/* id's row and the version it was got at (NULL: not cached). */
const float *hx__ps_cache_get(ps_cache *c, int64_t id, int64_t *ver);
/* id's row at version ver, kept (another id's may go). */
void hx__ps_cache_put(ps_cache *c, int64_t id, int64_t ver, const float *row);

/* The registry: entry i of ps (NULL past the end). */
ps_entry *hx__ps_entry(hx_ps *ps, int64_t i);

/* A worker: one reply from server j to request seq of c (older replies,
 * of a call that failed before reading them, are dropped), within the
 * timeout; the failure server j's reply rp (n bytes, its status not 0)
 * carries (embedding/ps_client.c). */
hx_status hx__ps_wait_reply(hx_emb_ps *c, int j, int64_t seq, hx_msg *m, hx_emb_err *err);
hx_status hx__ps_server_failed(const hx_ps *ps, int j, const ps_reply *rp, size_t n, hx_emb_err *err);

/* A worker's device cache over the servers (embedding/ps_devcache.c;
 * one worker only: it owns the rows it holds): the store of an
 * hx_emb_devcache in front of the worker's hx_emb_ps, whose misses are
 * fetched from the servers with their state and whose write-backs are
 * stored there (no reply: the servers take a worker's requests in the
 * order sent, so a later fetch or save finds them). A worker that has sent
 * nothing for a quarter of the timeout says it lives (PS_ALIVE) at its
 * next call, so that the servers can tell a dead one (hx_ps_serve). */
extern const hx_emb_devstore_ops hx__ps_devstore;
/* Under c's lock: request buf (n bytes) to server j of c's ps; c->sent_at
 * stamped, since the servers hear the worker in any message. */
hx_status hx__ps_send(hx_emb_ps *c, int j, const void *buf, size_t n);
/* Under c's lock: a PS_ALIVE to every server when c has sent them nothing
 * for a quarter of the timeout (a worker whose device cache, of one worker
 * or of hot rows on several, serves every row still says it lives). */
void hx__ps_alive_locked(hx_emb_ps *c);
/* Server: the reply to fetch h of table e (flags and records of its rows)
 * in *buf (*nb bytes, the caller frees it); fails naming what in err. */
hx_status hx__ps_fetch_reply(const ps_entry *e, const ps_req *h, int64_t applied, char **buf, size_t *nb,
                             hx_emb_err *err);
/* Server: store h's records into e's rows (all or, on failure, none). */
hx_status hx__ps_store(ps_entry *e, const ps_req *h, hx_emb_err *err);

/* Under c's lock (ps_devcache.c): a fetch of rows' records and cold flags
 * (as the store's read, records as hx_emb_hot_record sizes them),
 * answered once the servers have applied every push this worker made; a
 * store of records whose rows include `tag` steps (a server keeps a row
 * whose value includes more: ps_serve.c's e->ver). */
hx_status hx__ps_fetch_locked(hx_emb_ps *c, const int64_t *rows, int64_t n, char *recs, size_t stride,
                              uint8_t *cold, hx_emb_err *err);
hx_status hx__ps_store_locked(hx_emb_ps *c, const int64_t *rows, int64_t n, const char *recs, size_t stride,
                              int64_t tag, hx_emb_err *err);

/* ---- hot rows replicated on every worker (embedding/ps_hot.c) ----------------------------
 * device_cache_rows with several workers, synchronous: embedding/hot.h's
 * cache (c->hot, read with hx_emb_hot_*), every call under c's lock, on
 * every worker alike (create, update, set_optim are collective over the
 * workers or change what they hold). */
/* c->hot for a table of tc (collective over the workers: a duplicate of
 * their communicator). */
hx_status hx__ps_hot_create(hx_emb_ps *c, const hx_emb_table_config *tc, hx_emb_err *err);
void hx__ps_hot_free(hx_emb_ps *c);
/* Step c->pushes's update g (skip[i]: entry i is not pushed; the cached
 * rows' entries are set -1): the workers' exchange, the replica's step,
 * the next step's rows (the victims stored by worker 0 now, the admitted
 * ones fetched by hx__ps_hot_fill after the push). */
hx_status hx__ps_hot_update(hx_emb_ps *c, const hx_emb_sparse_grad *g, int64_t step, signed char *skip,
                            hx_emb_err *err);
hx_status hx__ps_hot_fill(hx_emb_ps *c, hx_status pushed, hx_emb_err *err); /* pushed: the push's status */
/* This worker stores its changed cached rows (a save's, hx_ps_finish's). */
hx_status hx__ps_hot_flush(hx_emb_ps *c, hx_emb_err *err);
/* Worker 0 stores the changed rows, every worker empties the cache and
 * takes optimizer o. */
hx_status hx__ps_hot_set_optim(hx_emb_ps *c, const hx_emb_optim *o, hx_emb_err *err);

#endif
