# Reconstructed from https://github.com/huggingface/accelerate/issues/2733
# (gather_object called only on the main process: the launcher hangs).
from accelerate import Accelerator
from accelerate.utils import gather_object
from transformers import AutoModelForCausalLM, AutoTokenizer


def grade(inputs):
    distributed_state = Accelerator()
    tokenizer = AutoTokenizer.from_pretrained("mistralai/Mistral-7B-Instruct-v0.2")
    model = AutoModelForCausalLM.from_pretrained("mistralai/Mistral-7B-Instruct-v0.2")
    model.to(distributed_state.device)
    txt_out = []
    with distributed_state.split_between_processes(inputs) as prompts:
        for prompt in prompts:
            ids = tokenizer(prompt, return_tensors="pt").to(distributed_state.device)
            txt_out.append(tokenizer.decode(model.generate(**ids)[0]))
    if distributed_state.is_main_process:
        print(gather_object(txt_out)[0])
        print(gather_object(txt_out)[1])
