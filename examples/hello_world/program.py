"""The smallest launchpad_py program: one node that greets and stops the program."""

import launchpad_py as lp


def greet(name: str) -> None:
    print(f'Hello, {name}! (from node {name!r})', flush=True)
    lp.stop()


def make_program(name: str = 'world') -> lp.Program:
    program = lp.Program('hello_world')
    program.add_node(lp.PyNode(greet, name), label='greeter')
    return program
