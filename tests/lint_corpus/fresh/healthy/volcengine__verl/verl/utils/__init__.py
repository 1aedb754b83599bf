# Copyright 2024 Bytedance Ltd. and/or its affiliates
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.

from . import config, tokenizer
from .config import omega_conf_to_dataclass, validate_config
from .groupwise import as_torch_index, group_mean_std
from .tokenizer import hf_processor, hf_tokenizer

__all__ = (
    tokenizer.__all__
    + config.__all__
    + ["hf_processor", "hf_tokenizer", "omega_conf_to_dataclass", "validate_config"]
    + ["as_torch_index", "group_mean_std"]
)
