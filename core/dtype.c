/* Names and sizes of dtypes and targets. */
#include "core/core.h"

size_t hx_dtype_size(hx_dtype dt)
{
    switch (dt) {
    case HX_DTYPE_F32: case HX_DTYPE_I32: return 4;
    case HX_DTYPE_F16: case HX_DTYPE_BF16: return 2;
    case HX_DTYPE_I64: return 8;
    }
    return 0;
}

const char *hx_dtype_name(hx_dtype dt)
{
    switch (dt) {
    case HX_DTYPE_F32: return "f32";
    case HX_DTYPE_F16: return "f16";
    case HX_DTYPE_BF16: return "bf16";
    case HX_DTYPE_I32: return "i32";
    case HX_DTYPE_I64: return "i64";
    }
    return "(invalid dtype)";
}

const char *hx_target_name(hx_target t)
{
    switch (t) {
    case HX_TARGET_DEFAULT: return "default";
    case HX_TARGET_CPU: return "cpu";
    case HX_TARGET_DEVICE: return "device";
    case HX_TARGET_AUTO: return "auto";
    }
    return "(invalid target)";
}

bool hx__is_float(hx_dtype dt)
{
    return dt == HX_DTYPE_F32 || dt == HX_DTYPE_F16 || dt == HX_DTYPE_BF16;
}
