"""python -m examples.mapreduce [--lp_launch_type=local_mp] [--inputs='docs/*.md'] [--num_reducers=2]

Counts the words of the input files (by default this project's courier
sources) with one mapper node per file and writes ``word<TAB>count`` lines.
"""

import glob
import os
import tempfile

from absl import app, flags

import launchpad_py as lp
from examples.mapreduce.program import make_program

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
INPUTS = flags.DEFINE_list('inputs', [os.path.join(_REPO, 'launchpad_py', 'courier', '*.py')],
                           'Glob patterns of the text files to count (one mapper per file).')
NUM_REDUCERS = flags.DEFINE_integer('num_reducers', 2, 'Reducer nodes.')
OUTPUT = flags.DEFINE_string('output', os.path.join(tempfile.gettempdir(), 'wordcount.tsv'),
                             'Where to write the counts.')


def main(argv):
    del argv
    paths = sorted({path for pattern in INPUTS.value for path in glob.glob(pattern)})
    if not paths:
        raise app.UsageError(f'--inputs matched no files: {INPUTS.value}')
    print(f'mapreduce: {len(paths)} files, {NUM_REDUCERS.value} reducers', flush=True)
    lp.launch(make_program(paths, OUTPUT.value, NUM_REDUCERS.value)).wait()


if __name__ == '__main__':
    app.run(main)
