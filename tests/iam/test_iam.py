import pytest
from django.core.management import CommandError, call_command

from fleet.models import ApiKey, Grant, Permission, Tenant
from fleet.services.iam import principal_for_key
from fleet.tokens import token_hash

pytestmark = pytest.mark.django_db


def test_createtenant_and_createapikey_print_a_working_key_last(capsys):
    call_command("createtenant", "acme")
    call_command("createapikey", "--tenant", "acme", "--user", "alice", "--grant", "compute:fleet:admin")
    plain = capsys.readouterr().out.strip().splitlines()[-1]
    principal = principal_for_key(plain)
    assert principal is not None
    assert principal.tenant.slug == "acme"
    assert principal.user.username == "alice"
    assert principal.is_fleet_admin


def test_api_key_is_stored_hashed_only(capsys):
    call_command("createtenant", "acme")
    call_command("createapikey", "--tenant", "acme", "--user", "bob")
    plain = capsys.readouterr().out.strip().splitlines()[-1]
    key = ApiKey.objects.get()
    assert key.key_hash == token_hash(plain)
    assert plain not in {key.prefix, key.key_hash}
    assert not principal_for_key(plain).is_fleet_admin
    assert not Grant.objects.exists()


def test_createapikey_refuses_unknown_tenant_and_writes_nothing():
    with pytest.raises(CommandError, match="No tenant"):
        call_command("createapikey", "--tenant", "nope", "--user", "alice")
    assert not ApiKey.objects.exists()


def test_createtenant_refuses_a_duplicate():
    call_command("createtenant", "acme")
    with pytest.raises(CommandError, match="already exists"):
        call_command("createtenant", "acme")
    assert Tenant.objects.count() == 1


def test_a_user_acts_in_one_tenant_only():
    call_command("createtenant", "acme")
    call_command("createtenant", "globex")
    call_command("createapikey", "--tenant", "acme", "--user", "alice")
    with pytest.raises(CommandError, match="belongs to tenant 'acme'"):
        call_command("createapikey", "--tenant", "globex", "--user", "alice", "--grant", Permission.FLEET_ADMIN)
    assert ApiKey.objects.count() == 1
    assert not Grant.objects.exists()


def test_revoked_and_unknown_keys_do_not_authenticate(capsys):
    call_command("createtenant", "acme")
    call_command("createapikey", "--tenant", "acme", "--user", "alice")
    plain = capsys.readouterr().out.strip().splitlines()[-1]
    ApiKey.objects.update(revoked_at="2026-01-01T00:00:00Z")
    assert principal_for_key(plain) is None
    assert principal_for_key("rk_unknown") is None
