# Copyright (c) OpenMMLab. All rights reserved.
from .manager import ManagerMeta, ManagerMixin
from .misc import (apply_to, check_prerequisites, concat_list,
                   deprecated_api_warning, deprecated_function,
                   get_object_from_string, has_method,
                   import_modules_from_strings, is_list_of,
                   is_method_overridden, is_seq_of, is_str, is_tuple_of,
                   iter_cast, list_cast, requires_executable, requires_package,
                   slice_list, to_1tuple, to_2tuple, to_3tuple, to_4tuple,
                   to_ntuple, tuple_cast)
from .package_utils import (call_command, get_installed_path, install_package,
                            is_installed)
from .path import (check_file_exist, fopen, is_abs, is_filepath,
                   mkdir_or_exist, scandir, symlink)
from .progressbar import (ProgressBar, track_iter_progress,
                          track_parallel_progress, track_progress)
from .progressbar_rich import track_progress_rich
from .timer import Timer, TimerError, check_time
from .version_utils import digit_version, get_git_hash

__all__ = [
    'is_str', 'iter_cast', 'list_cast', 'tuple_cast', 'is_seq_of',
    'is_list_of', 'is_tuple_of', 'slice_list', 'concat_list',
    'check_prerequisites', 'requires_package', 'requires_executable',
    'is_filepath', 'fopen', 'check_file_exist', 'mkdir_or_exist', 'symlink',
    'scandir', 'deprecated_api_warning', 'import_modules_from_strings',
    'to_1tuple', 'to_2tuple', 'to_3tuple', 'to_4tuple', 'to_ntuple',
    'is_installed', 'call_command', 'get_installed_path', 'install_package',
    'is_abs', 'is_method_overridden', 'has_method', 'digit_version',
    'get_git_hash', 'ManagerMeta', 'ManagerMixin', 'Timer', 'check_time',
    'TimerError', 'ProgressBar', 'track_iter_progress',
    'track_parallel_progress', 'track_progress', 'deprecated_function',
    'apply_to', 'track_progress_rich', 'get_object_from_string'
]
