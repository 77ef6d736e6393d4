"""Parameter and table initialisers (hx_init values). A parameter's initial
value is a pure function of the session seed and the parameter's name."""
from ._lib import lib


def zeros():
    return lib.hx_init_zeros()


def constant(value):
    return lib.hx_init_constant(float(value))


def uniform(low, high):
    return lib.hx_init_uniform(float(low), float(high))


def normal(mean=0.0, std=1.0):
    return lib.hx_init_normal(float(mean), float(std))


def xavier_uniform(gain=1.0):
    """fan_in, fan_out: the parameter's last two dims."""
    return lib.hx_init_xavier_uniform(float(gain))


def xavier_normal(gain=1.0):
    return lib.hx_init_xavier_normal(float(gain))
