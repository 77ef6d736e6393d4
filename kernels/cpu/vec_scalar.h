/* The float vector vocabulary of the path files (optim_*.c, vmath_*.c),
 * scalar path: one lane. Included by a path file after its pragmas; each
 * file adds the words only it uses.
 *   W, V                          lanes, vector of W floats
 *   V_LOAD(p) V_STORE(p, x)       any alignment
 *   V_SET1 V_ADD V_SUB V_MUL V_DIV V_SQRT
 *   V_FMA(a, b, c)                a*b + c, one rounding
 *   V_ABS(x) V_COPYSIGN(m, s)     |x|; |m| with the sign of s */
#ifndef HX_VEC_SCALAR_H
#define HX_VEC_SCALAR_H

#include <math.h>

#define W 1
typedef float V;
#define V_LOAD(p) (*(p))
#define V_STORE(p, x) (*(p) = (x))
#define V_SET1(x) (x)
#define V_ADD(a, b) ((a) + (b))
#define V_SUB(a, b) ((a) - (b))
#define V_MUL(a, b) ((a) * (b))
#define V_DIV(a, b) ((a) / (b))
#define V_SQRT(x) sqrtf(x)
#define V_FMA(a, b, c) fmaf(a, b, c)
#define V_ABS(x) fabsf(x)
#define V_COPYSIGN(m, s) copysignf(m, s)

#endif
