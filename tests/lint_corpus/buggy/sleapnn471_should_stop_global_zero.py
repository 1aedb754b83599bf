# Reconstructed from https://github.com/talmolab/sleap-nn/pull/471
# (a stop command received on rank 0 sets trainer.should_stop there only; a barrier does not
# share the value, rank 0 leaves the loop and the other ranks wait in the next collective).
import lightning.pytorch as pl
import zmq


class TrainingControllerZMQ(pl.Callback):
    def __init__(self, address="tcp://127.0.0.1:9000"):
        self.context = zmq.Context()
        self.socket = self.context.socket(zmq.SUB)
        self.socket.connect(address)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.is_global_zero:
            if self.socket.poll(timeout=0):
                message = self.socket.recv_json()
                if message.get("command") == "stop":
                    trainer.should_stop = True
        trainer.strategy.barrier()
