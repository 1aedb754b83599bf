import logging

SELF_MODULE_PATH = '.'
LOGGING_FORMAT = '%(asctime)s\t%(levelname)s\t%(name)s\t%(message)s'
def_logger = logging.getLogger()
