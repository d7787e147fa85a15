"""Accounts at the service level: registration behind consent, login, admins."""
from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import func, select

from database.models import AuditLog, User
from services.participants.account_service import authenticate, bootstrap_admin, create_admin, register
from services.platform.errors import BadInput, Conflict, Unauthorised


def sign_up(session, study, clock, username="alice_01", password="correct-horse-1", **overrides) -> User:
    fields = {"consent": True, "language": "en", **overrides}
    return register(session, username=username, password=password, study=study, clock=clock, seed=7, **fields)


def users(session) -> int:
    return session.scalar(select(func.count()).select_from(User))


def test_registration_stores_a_hash_a_code_a_group_and_the_consent(db_session, study, clock):
    user = sign_up(db_session, study, clock, username="  alice_01 ")

    stored = db_session.get(User, user.id)
    assert stored.username == "alice_01"  # surrounding blanks are not part of the name
    assert stored.password_hash != "correct-horse-1" and "correct-horse-1" not in stored.password_hash
    assert stored.role == "participant" and stored.status == "active" and stored.language == "en"
    assert stored.participant_code.startswith("P") and len(stored.participant_code) == 9
    assert stored.memory_group in study.enabled_conditions
    assert stored.consent_at == clock.now() and stored.consent_version == study.consent.version


def test_an_unknown_language_falls_back_to_the_study_default(db_session, study, clock):
    assert sign_up(db_session, study, clock, language="fr").language == study.default_language


@pytest.mark.parametrize("consent", [False, None, "yes", 1])
def test_registration_without_consent_is_refused_and_stores_nothing(db_session, study, clock, consent):
    with pytest.raises(BadInput) as refused:
        sign_up(db_session, study, clock, consent=consent)
    assert refused.value.code == "consent_required"
    assert users(db_session) == 0


@pytest.mark.parametrize(("username", "password", "code"), [
    ("ab", "correct-horse-1", "invalid_username"),
    ("has space", "correct-horse-1", "invalid_username"),
    ("x" * 33, "correct-horse-1", "invalid_username"),
    (None, "correct-horse-1", "invalid_username"),
    ("alice_01", "short", "invalid_password"),
    ("alice_01", 12345678, "invalid_password"),
])
def test_bad_credentials_are_refused_with_a_code_naming_the_field(db_session, study, clock, username, password,
                                                                  code):
    with pytest.raises(BadInput) as refused:
        sign_up(db_session, study, clock, username=username, password=password)
    assert refused.value.code == code
    assert users(db_session) == 0


def test_a_username_is_taken_whatever_its_case(db_session, study, clock):
    sign_up(db_session, study, clock, username="Alice_01")

    with pytest.raises(Conflict) as taken:
        sign_up(db_session, study, clock, username="alice_01", password="another-pass-2")

    assert taken.value.code == "username_taken"
    assert users(db_session) == 1


def test_login_accepts_the_password_and_any_case_of_the_name(db_session, study, clock):
    user = sign_up(db_session, study, clock)
    assert authenticate(db_session, "ALICE_01 ", "correct-horse-1").id == user.id


@pytest.mark.parametrize(("username", "password"), [("alice_01", "wrong-horse-1"), ("nobody", "correct-horse-1")])
def test_a_wrong_password_and_an_unknown_name_get_the_same_answer(db_session, study, clock, username, password):
    sign_up(db_session, study, clock)
    with pytest.raises(Unauthorised) as refused:
        authenticate(db_session, username, password)
    assert refused.value.code == "invalid_credentials"


def test_login_with_missing_fields_is_bad_input(db_session):
    with pytest.raises(BadInput) as refused:
        authenticate(db_session, None, "x")
    assert refused.value.code == "invalid_credentials_format"


def test_create_admin_then_reset_its_password_both_audited(db_session, clock):
    admin = create_admin(db_session, "labadmin", "first-password-1", clock)
    assert admin.role == "admin"
    create_admin(db_session, "labadmin", "second-password-2", clock)

    assert authenticate(db_session, "labadmin", "second-password-2").id == admin.id
    with pytest.raises(Unauthorised):
        authenticate(db_session, "labadmin", "first-password-1")
    actions = db_session.scalars(select(AuditLog.action).where(AuditLog.target_user_id == admin.id)
                                 .order_by(AuditLog.id)).all()
    assert actions == ["admin_created", "admin_password_reset"]


def test_a_participant_cannot_be_turned_into_an_admin(db_session, study, clock):
    participant = sign_up(db_session, study, clock)
    with pytest.raises(Conflict):
        create_admin(db_session, "alice_01", "admin-password-1", clock)
    assert db_session.get(User, participant.id).role == "participant"


def test_create_admin_refuses_a_weak_password(db_session, clock):
    with pytest.raises(BadInput) as refused:
        create_admin(db_session, "labadmin", "short", clock)
    assert refused.value.code == "invalid_password"


def test_bootstrap_creates_one_admin_with_a_generated_password_only_once(db_session, clock):
    username, password = bootstrap_admin(db_session, clock)

    assert authenticate(db_session, username, password).role == "admin"
    assert len(password) >= 12
    assert bootstrap_admin(db_session, clock) is None


def test_passwords_are_hashed_at_the_production_cost_outside_the_test_suite():
    """The suite hashes with a cheap scrypt (tests/conftest.py); a fresh process, as the app runs, must not."""
    import subprocess
    import sys

    from services.participants import account_service
    from tests.conftest import TEST_PASSWORD_METHOD

    code = ("from services.participants.account_service import hash_password, PASSWORD_METHOD;"
            "print(PASSWORD_METHOD); print(hash_password('correct-horse-1'))")
    method, hashed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                                    cwd=Path(__file__).resolve().parents[3]).stdout.split()
    assert method == "scrypt:32768:8:1" and hashed.startswith("scrypt:32768:8:1$")
    assert account_service.PASSWORD_METHOD == TEST_PASSWORD_METHOD  # this process: the suite's cheap one
    # a hash made at either cost verifies under the other setting: the stored hash names its parameters
    assert account_service.check_password_hash(hashed, "correct-horse-1")
    assert not account_service.check_password_hash(hashed, "correct-horse-2")

