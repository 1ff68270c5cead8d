"""The controls catalogue (``policies/controls.yaml``, issue 34): every policy it names is one the pack
serves, every pack policy is mapped or listed unmapped with a reason, and every control cites its source.
"""

from __future__ import annotations

from mlplatform.analyzer import PolicyPackSession
from mlplatform.evidence import load_controls


def test_the_catalogue_names_the_pack_policies_and_sources_each_control(pack: PolicyPackSession) -> None:
    catalogue = load_controls(pack.pack_dir)
    served = {policy.name for policy in pack.info.policies}
    mapped = {p for control in catalogue.controls for p in control.policies}
    listed = {p for unmapped in catalogue.unmapped for p in unmapped.policies}
    assert mapped - served == set() and listed - served == set()
    assert served - mapped - listed == set()  # a new policy needs a control, or a reason it has none
    assert all(control.source.strip() for control in catalogue.controls)
    assert len({control.id for control in catalogue.controls}) == len(catalogue.controls)
    # Applicability names mapped policies only: a typo would make a policy judge every stack again.
    assert set(catalogue.subjects) <= mapped
    assert all(set(control.required) <= set(control.policies) for control in catalogue.controls)
