"""One error type for the stack, whose message names the step and the cause."""


class StackError(RuntimeError):
    def __init__(self, step: str, cause: str):
        super().__init__(f"{step}: {cause}")
        self.step = step
        self.cause = cause
