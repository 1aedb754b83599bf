"""Infrastructure to implement and train NNPs"""

# Add imports here
from .modelforge import *


from ._version import __version__
