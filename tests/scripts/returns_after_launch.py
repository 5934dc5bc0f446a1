"""A local_mt script that returns right after lp.launch(); its nodes must keep serving."""

import launchpad_py as lp


class Producer:
    def value(self, i):
        return i * 2


def consume(producer):
    total = sum(producer.futures.value(i).result() for i in range(50))
    print(f'total {total}', flush=True)
    lp.stop()


program = lp.Program('returns_after_launch')
producer = program.add_node(lp.CourierNode(Producer), label='producer')
program.add_node(lp.PyNode(consume, producer), label='consumer')
lp.launch(program, launch_type='local_mt')
