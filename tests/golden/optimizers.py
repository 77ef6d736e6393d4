#!/usr/bin/env python3
"""Golden values of tests/test_numerics.c: the optimizers as the frameworks
document them, evaluated in float64 (Python floats) from f32 inputs, each
result rounded to f32 and printed as a C initialiser.

  torch.optim.SGD, Adam, AdamW, Adagrad: the algorithms of their docs
    (pytorch.org/docs/stable/generated/torch.optim.*.html);
  TensorFlow FTRL-proximal: tf.raw_ops.ApplyFtrlV2 / SparseApplyFtrlV2 as
    documented, lr_power -0.5;
  LazyAdam: tensorflow_addons.optimizers.LazyAdam (torch.optim.SparseAdam
    is the same update): moments and parameters of the rows looked up;
  row-wise Adagrad: FBGEMM's EXACT_ROWWISE_ADAGRAD, one accumulator per row
    growing by the mean of g^2.

Run: python3 tests/golden/optimizers.py (no packages needed)."""
import math
import struct


def f32(x):
    return struct.unpack('f', struct.pack('f', x))[0]


P0 = [0.5, -1.25, 2.0, -0.375]


def grad(k, j, c=0):
    """Gradient of element j (row position j, column c) at step k: exact in f32."""
    return (((3 * k + 5 * j + 2 * c) % 7) - 3) * 0.25 + 0.125 * j


def sgd(lr, momentum, dampening, wd, nesterov, steps):
    p, b = list(P0), [0.0] * 4
    for t in range(1, steps + 1):
        for j in range(4):
            g = grad(t, j) + wd * p[j]
            b[j] = g if t == 1 else momentum * b[j] + (1 - dampening) * g
            g = g + momentum * b[j] if nesterov else b[j]
            p[j] = p[j] - lr * g
    return p, [b]


def adam(lr, b1, b2, eps, wd, decoupled, steps):
    p, m, v = list(P0), [0.0] * 4, [0.0] * 4
    for t in range(1, steps + 1):
        for j in range(4):
            g = grad(t, j)
            if decoupled:
                p[j] = p[j] - lr * wd * p[j]
            else:
                g = g + wd * p[j]
            m[j] = b1 * m[j] + (1 - b1) * g
            v[j] = b2 * v[j] + (1 - b2) * g * g
            mhat = m[j] / (1 - b1 ** t)
            vhat = v[j] / (1 - b2 ** t)
            p[j] = p[j] - lr * mhat / (math.sqrt(vhat) + eps)
    return p, [m, v]


def adagrad(lr, lr_decay, wd, acc0, eps, steps):
    p, s = list(P0), [acc0] * 4
    for t in range(1, steps + 1):
        clr = lr / (1 + (t - 1) * lr_decay)
        for j in range(4):
            g = grad(t, j) + wd * p[j]
            s[j] = s[j] + g * g
            p[j] = p[j] - clr * g / (math.sqrt(s[j]) + eps)
    return p, [s]


def ftrl_elem(p, n, z, g, lr, l1, l2, shrink):
    gs = g + 2 * shrink * p
    n_new = n + g * g
    z = z + gs - (math.sqrt(n_new) - math.sqrt(n)) / lr * p
    quadratic = math.sqrt(n_new) / lr + 2 * l2
    p = (math.copysign(l1, z) - z) / quadratic if abs(z) > l1 else 0.0
    return p, n_new, z


def ftrl(lr, l1, l2, shrink, acc0, steps):
    p, n, z = list(P0), [acc0] * 4, [0.0] * 4
    for t in range(1, steps + 1):
        for j in range(4):
            p[j], n[j], z[j] = ftrl_elem(p[j], n[j], z[j], grad(t, j), lr, l1, l2, shrink)
    return p, [n, z]


# ---- tables: 6 rows x 3 columns, two rows looked up per step ---------------------

ROWS, DIM, TSTEPS = 6, 3, 3


def table0():
    return [[0.25 * (r + 1) * (-1) ** r + 0.0625 * c for c in range(DIM)] for r in range(ROWS)]


def ids(k):
    return [k % 3, 4]  # step 1: rows 1, 4; step 2: 2, 4; step 3: 0, 4


def lazy_adam(lr, b1, b2, eps):
    p = table0()
    m = [[0.0] * DIM for _ in range(ROWS)]
    v = [[0.0] * DIM for _ in range(ROWS)]
    for t in range(1, TSTEPS + 1):
        lr_t = lr * math.sqrt(1 - b2 ** t) / (1 - b1 ** t)
        for i, r in enumerate(ids(t)):
            for c in range(DIM):
                g = grad(t, i, c)
                m[r][c] = b1 * m[r][c] + (1 - b1) * g
                v[r][c] = b2 * v[r][c] + (1 - b2) * g * g
                p[r][c] = p[r][c] - lr_t * m[r][c] / (math.sqrt(v[r][c]) + eps)
    return p, [m, v]


def table_adagrad(lr, lr_decay, acc0, eps):
    p = table0()
    s = [[acc0] * DIM for _ in range(ROWS)]
    for t in range(1, TSTEPS + 1):
        clr = lr / (1 + (t - 1) * lr_decay)
        for i, r in enumerate(ids(t)):
            for c in range(DIM):
                g = grad(t, i, c)
                s[r][c] = s[r][c] + g * g
                p[r][c] = p[r][c] - clr * g / (math.sqrt(s[r][c]) + eps)
    return p, [s]


def row_adagrad(lr, acc0, eps):
    p = table0()
    a = [[acc0] for _ in range(ROWS)]
    for t in range(1, TSTEPS + 1):
        for i, r in enumerate(ids(t)):
            g = [grad(t, i, c) for c in range(DIM)]
            a[r][0] = a[r][0] + sum(x * x for x in g) / DIM
            for c in range(DIM):
                p[r][c] = p[r][c] - lr * g[c] / (math.sqrt(a[r][0]) + eps)
    return p, [a]


def table_ftrl(lr, l1, l2, shrink, acc0):
    p = table0()
    n = [[acc0] * DIM for _ in range(ROWS)]
    z = [[0.0] * DIM for _ in range(ROWS)]
    for t in range(1, TSTEPS + 1):
        for i, r in enumerate(ids(t)):
            for c in range(DIM):
                p[r][c], n[r][c], z[r][c] = ftrl_elem(p[r][c], n[r][c], z[r][c], grad(t, i, c),
                                                      lr, l1, l2, shrink)
    return p, [n, z]


def flat(x):
    return [y for row in x for y in row] if isinstance(x[0], list) else x


def c_float(x):
    s = '%.9g' % f32(x)
    return s + ('f' if any(ch in s for ch in '.e') else '.0f')


def show(name, res, tags):
    p, states = res
    for tag, a in zip(tags, [p] + states):
        a = flat(a)
        line, lines = 'static const float %s_%s[%d] = {' % (name, tag, len(a)), []
        for i, x in enumerate(a):
            item = c_float(x) + ('};' if i == len(a) - 1 else ',')
            if len(line) + 1 + len(item) > 100:
                lines.append(line)
                line = '   '
            line += ('' if line.endswith('{') else ' ') + item
        print('\n'.join(lines + [line]))


STEPS = 5
show('GOLD_SGD', sgd(0.05, 0.9, 0.1, 0.01, False, STEPS), ['P', 'MOMENTUM'])
show('GOLD_NESTEROV', sgd(0.05, 0.9, 0.0, 0.01, True, STEPS), ['P', 'MOMENTUM'])
show('GOLD_ADAM', adam(0.01, 0.9, 0.999, 1e-8, 0.01, False, STEPS), ['P', 'EXP_AVG', 'EXP_AVG_SQ'])
show('GOLD_ADAMW', adam(0.01, 0.9, 0.999, 1e-8, 0.1, True, STEPS), ['P', 'EXP_AVG', 'EXP_AVG_SQ'])
show('GOLD_ADAGRAD', adagrad(0.1, 0.01, 0.02, 0.1, 1e-10, STEPS), ['P', 'SUM'])
show('GOLD_FTRL', ftrl(0.05, 0.001, 0.01, 0.005, 0.1, STEPS), ['P', 'ACCUM', 'LINEAR'])
show('GOLD_LAZY_ADAM', lazy_adam(0.01, 0.9, 0.999, 1e-8), ['ROWS', 'M', 'V'])
show('GOLD_TABLE_ADAGRAD', table_adagrad(0.1, 0.01, 0.1, 1e-10), ['ROWS', 'SUM'])
show('GOLD_ROW_ADAGRAD', row_adagrad(0.1, 0.1, 1e-10), ['ROWS', 'ACC'])
show('GOLD_TABLE_FTRL', table_ftrl(0.05, 0.001, 0.01, 0.005, 0.1), ['ROWS', 'ACCUM', 'LINEAR'])
