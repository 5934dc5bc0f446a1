"""The launching script tests/test_submit_kubernetes.py submits: ``submit_scripts``' nodes as pods.

    python submit_k8s_script.py ticker [LEASE_S]

It runs in the controller pod of the fake cluster (tests/ on its PYTHONPATH), and
launches its one node as a pod of the same cluster, with the fake's image (or
``LP_TEST_NODE_IMAGE``, which the podman run sets in the controller's env).
"""

import os
import sys

import launchpad_py as lp
from fake_kube import IMAGE
from submit_scripts import resume, short, tick

if __name__ == '__main__':
    kind = sys.argv[1]
    program = lp.Program(kind)
    program.add_node(lp.PyNode({'ticker': tick, 'short': short, 'resumer': resume}[kind]),
                     label='worker')
    lp.launch(program, launch_type='kubernetes',
              resources={'worker': lp.KubernetesResources(
                  image=os.environ.get('LP_TEST_NODE_IMAGE', IMAGE))},
              kubernetes_options={'lease_seconds': int(sys.argv[2]) if len(sys.argv) > 2 else 60}
              ).wait()
