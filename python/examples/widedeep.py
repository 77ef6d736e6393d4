"""Wide & deep on UCI Adult through the Python binding: the same model,
data pipeline and schedule as `hetex widedeep` (examples/widedeep/), so the
same flags and seed give bitwise the same numbers (python/tests/
test_examples.py compares the per-epoch metrics and the checkpoints).

A wide linear part over sparse categorical and crossed features (an FTRL
embedding bag on the host), a deep part of host embeddings (Adagrad or
LazyAdam) and numeric features feeding an MLP on the device (Adam); their
logits summed, sigmoid cross-entropy.

    python python/examples/widedeep.py --epochs 2 --batch 512 --accelerator emu
"""
import argparse
import math
import os
import sys
import time

import numpy as np

import hetex

HERE = os.path.dirname(os.path.abspath(__file__))
NUMERIC = ("age", "fnlwgt", "education_num", "capital_gain", "capital_loss", "hours_per_week")
NUMERIC_LOG = (False, True, False, True, True, False)
CATEGORICAL = ("workclass", "education", "marital_status", "occupation", "relationship", "race",
               "sex", "native_country")
AGE_BOUNDARIES = (18, 25, 30, 35, 40, 45, 50, 55, 60, 65)


def parse(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=os.path.join(HERE, "..", "..", "data", "adult"))
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--accelerator", default="auto", choices=("auto", "cuda", "emu", "none"))
    ap.add_argument("--placement", default="expert", choices=("expert", "auto", "host"))
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--reader-threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--deep-dim", type=int, default=8)
    ap.add_argument("--hidden", default="100,50")
    ap.add_argument("--lr-dense", type=float, default=1e-3)
    ap.add_argument("--embedding-optimizer", default="adagrad", choices=("adagrad", "lazy-adam"))
    ap.add_argument("--lr-embedding", type=float, default=1e-2)
    ap.add_argument("--lr-wide", type=float, default=0.05)
    ap.add_argument("--l1", type=float, default=0.001)
    ap.add_argument("--l2", type=float, default=0.001)
    ap.add_argument("--cross-buckets", type=int, default=1000)
    ap.add_argument("--save", help="checkpoint folder written after every epoch")
    ap.add_argument("--curve", help="per-epoch metrics as CSV")
    a = ap.parse_args(argv)
    a.hidden = [int(v) for v in a.hidden.split(",")]
    if len(a.hidden) != 2:
        ap.error("--hidden takes two widths")
    return a


def input_check(reader, test):
    """One pass over the file (as the CLI's input check makes, which is also
    an epoch of the reader's shuffle), then a rewind."""
    rows = positives = 0
    for b in reader:
        rows += b.n
        positives += int((b.labels > 0.5).sum())
    reader.rewind()
    if rows == 0 or (test and positives in (0, rows)):
        sys.exit(f"widedeep.py: {reader.path} cannot be used ({rows} rows, {positives} positive)")
    return rows


def fit_features(train, cross_buckets):
    col_vocab = len(NUMERIC)
    col_age = col_vocab + len(CATEGORICAL)
    cols = []
    for name, log in zip(NUMERIC, NUMERIC_LOG):
        cols.append(hetex.feature_column("numeric", name, train.find(name), log1p=log,
                                         standardize=True))
    for name in CATEGORICAL:
        cols.append(hetex.feature_column("vocabulary", name, train.find(name), wide=True))
    cols.append(hetex.feature_column("bucketized", "age_buckets", train.find("age"),
                                     boundaries=AGE_BOUNDARIES, wide=True))
    vocab = {name: col_vocab + k for k, name in enumerate(CATEGORICAL)}
    crosses = [("education_x_occupation", [vocab["education"], vocab["occupation"]]),
               ("age_x_education_x_occupation", [col_age, vocab["education"], vocab["occupation"]]),
               ("country_x_occupation", [vocab["native_country"], vocab["occupation"]])]
    for k, (name, src) in enumerate(crosses):
        cols.append(hetex.feature_column("crossed", name, crossed=src, hash_buckets=cross_buckets,
                                         hash_seed=0x5EED + k, wide=True))
    deep_cols = [col_vocab + k for k in range(len(CATEGORICAL))]
    f = hetex.Features(cols, embeddings=[("deep", deep_cols, 1)], n_numeric=len(NUMERIC),
                       n_categorical=len(CATEGORICAL))
    f.fit(train)
    deep_rows, deep_offsets = f.embedding(0, len(CATEGORICAL))
    deep_columns = np.array([f.info(c)["index"] for c in deep_cols], np.int64)
    return f, f.shape(), deep_rows, deep_offsets, deep_columns


class Model:
    def __init__(self, a, shape, deep_rows, n_deep):
        opt = (hetex.optim.LazyAdam if a.embedding_optimizer == "lazy-adam"
               else hetex.optim.SparseAdagrad)
        self.deep = hetex.EmbeddingTable(deep_rows, a.deep_dim, name="deep",
                                         init=hetex.init.normal(0, 0.05), seed=a.seed,
                                         n_threads=a.threads, optimizer=opt(lr=a.lr_embedding))
        self.wide = hetex.EmbeddingTable(shape["wide_dim"], 1, name="wide", init=hetex.init.zeros(),
                                         n_threads=a.threads,
                                         optimizer=hetex.optim.SparseFTRL(lr=a.lr_wide, l1=a.l1,
                                                                          l2=a.l2))
        B, K, E, W, D = a.batch, n_deep, a.deep_dim, shape["n_wide"], shape["dense_dim"]
        g = self.g = hetex.Graph()
        self.dense = g.input("dense", (B, D))
        self.deep_ids = g.input("deep_ids", (B, K), "i64")
        self.wide_ids = g.input("wide_ids", (B * W,), "i64")
        self.wide_offsets = g.input("wide_offsets", (B,), "i64")
        self.labels = g.input("labels", (B,))
        emb = hetex.embedding_lookup(self.deep, self.deep_ids)               # (B,K,E) host
        wide = hetex.embedding_bag(self.wide, self.wide_ids, self.wide_offsets)  # (B,1) host
        where = {"expert": "device", "auto": "auto", "host": "cpu"}[a.placement]

        def layer(x, n_in, n_out, i):
            w = g.param(f"mlp{i}.w", (n_in, n_out), init=hetex.init.xavier_uniform(1.0),
                        target=where)
            b = g.param(f"mlp{i}.b", (n_out,), init=hetex.init.zeros(), target=where)
            return hetex.bias_add(x @ w, b)

        with g.target(where):
            x = hetex.concat([self.dense, emb.reshape((B, K * E))], axis=1)
            x = layer(x, D + K * E, a.hidden[0], 1).relu()
            x = layer(x, a.hidden[0], a.hidden[1], 2).relu()
            logit = (layer(x, a.hidden[1], 1, 3) + wide).reshape((B,))
            self.prob = hetex.sigmoid(logit, name="prob")
            self.loss = hetex.bce_with_logits(logit, self.labels, name="loss")
        g.backward(self.loss)
        g.apply_optimizer(hetex.optim.Adam(lr=a.lr_dense))

    def feeds(self, fd):
        return {self.dense: fd["dense"], self.deep_ids: fd["deep_ids"],
                self.wide_ids: fd["wide_ids"], self.wide_offsets: fd["wide_offsets"],
                self.labels: fd["labels"]}


def feed(features, batch, B, deep_columns, deep_offsets, n_wide):
    """A batch (<= B rows) as the graph feeds it: rows past its end repeat row 0."""
    t = features.transform(batch)
    n = batch.n
    src = np.arange(B)
    src[src >= n] = 0
    wide_idx = t["wide_offsets"][src][:, None] + np.arange(n_wide)
    return {"n": n,
            "dense": np.ascontiguousarray(t["dense"][src]),
            "deep_ids": np.ascontiguousarray((t["ids"][deep_columns][:, src]
                                              + deep_offsets[:, None]).T),
            "wide_ids": np.ascontiguousarray(t["wide_ids"][wide_idx].reshape(-1)),
            "wide_offsets": np.arange(B, dtype=np.int64) * n_wide,
            "labels": np.ascontiguousarray(t["labels"][src])}


def metrics(p, y):
    """Exact AUC (ties one half), accuracy at 0.5 and log loss, in the C
    example's order of operations (examples/widedeep/wd_metrics.c)."""
    n = p.size
    pos = right = loss = 0.0
    half = np.float32(0.5)
    for pi, yi in zip(p.tolist(), (y > half).tolist()):
        pos += yi
        right += (pi > 0.5) == yi
        q = min(max(pi, 1e-7), 1 - 1e-7)
        loss -= math.log(q) if yi else math.log(1 - q)
    order = np.argsort(p, kind="stable")
    sp, sy = p[order].tolist(), (y[order] > half).tolist()
    rank_sum = 0.0
    i = 0
    while i < n:
        j = i
        tied = 0.0
        while j < n and sp[j] == sp[i]:
            tied += sy[j]
            j += 1
        rank_sum += tied * float(i + 1 + j) / 2.0
        i = j
    neg = n - pos
    auc = (rank_sum - pos * (pos + 1) / 2) / (pos * neg) if pos and neg else float("nan")
    return auc, right / n, loss / n


def main(argv=None):
    a = parse(argv)
    t_start = time.perf_counter()
    train = hetex.Reader(os.path.join(a.data, "adult.data"), "adult", batch_size=a.batch,
                         n_threads=a.reader_threads, shuffle_rows=1 << 15, shuffle_seed=a.seed)
    test = hetex.Reader(os.path.join(a.data, "adult.test"), "adult_test", batch_size=a.batch,
                        n_threads=a.reader_threads)
    input_check(train, False)
    input_check(test, True)
    features, shape, deep_rows, deep_offsets, deep_columns = fit_features(train, a.cross_buckets)
    m = Model(a, shape, deep_rows, len(CATEGORICAL))
    s = hetex.Session(m.g, accelerator=a.accelerator, n_threads=a.threads, seed=a.seed,
                      auto_placement=a.placement == "auto")
    info = s.accelerator_info()
    print(f"widedeep.py: {a.data}, batch {a.batch}, {a.epochs} epochs")
    print(f"widedeep.py: accelerator: {info['in_use']} ({info['why']})")
    curve = open(a.curve, "w") if a.curve else None
    if curve:
        curve.write("epoch,train_loss,test_loss,test_auc,test_accuracy\n")
    W = shape["n_wide"]
    for e in range(1, a.epochs + 1):
        t0 = time.perf_counter()
        total, batches, rows = 0.0, 0, 0
        full = (b for b in train if b.n >= a.batch)  # full batches only
        cur = next(full, None)
        cur_fd = feed(features, cur, a.batch, deep_columns, deep_offsets, W) if cur else None
        while cur_fd is not None:
            nxt = next(full, None)  # read ahead; its deep rows prefetched (tables on disk)
            nxt_fd = feed(features, nxt, a.batch, deep_columns, deep_offsets, W) if nxt else None
            if nxt_fd is not None:
                m.deep.prefetch(nxt_fd["deep_ids"])
            loss = s.run(m.feeds(cur_fd), m.loss, train=True)
            total += float(loss)
            rows += cur_fd["n"]
            batches += 1
            cur_fd = nxt_fd
        train.rewind()
        rate = rows / (time.perf_counter() - t0)
        probs, labels = [], []
        for b in test:
            fd = feed(features, b, a.batch, deep_columns, deep_offsets, W)
            p = s.run(m.feeds(fd), m.prob)
            probs.append(p[:b.n])
            labels.append(fd["labels"][:b.n])
        test.rewind()
        auc, acc, log_loss = metrics(np.concatenate(probs), np.concatenate(labels))
        train_loss = total / batches
        print(f"epoch {e:2d}  train loss {train_loss:.4f}  test loss {log_loss:.4f}  "
              f"AUC {auc:.4f}  accuracy {acc:.4f}  {rate:.0f} examples/s", flush=True)
        if curve:
            curve.write(f"{e},{train_loss:.6f},{log_loss:.6f},{auc:.6f},{acc:.6f}\n")
            curve.flush()
        if a.save:
            os.makedirs(a.save, exist_ok=True)
            s.save(os.path.join(a.save, "session"))
            m.deep.save(os.path.join(a.save, "deep"))
            m.wide.save(os.path.join(a.save, "wide"))
    ps = s.placement_stats()
    print(f"final: accuracy {acc:.4f}  AUC {auc:.4f}  log loss {log_loss:.4f} on "
          f"{sum(p.size for p in probs)} test rows; {time.perf_counter() - t_start:.1f} s")
    print(f"placement: {ps['n_ops']} ops, {ps['n_device_ops']} on the device, "
          f"{ps['n_ops'] - ps['n_device_ops']} on the host")
    if curve:
        curve.close()


if __name__ == "__main__":
    main()
