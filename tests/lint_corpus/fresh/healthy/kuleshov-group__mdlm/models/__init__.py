from . import dit
from . import dimamba
from . import ema
from . import autoregressive
