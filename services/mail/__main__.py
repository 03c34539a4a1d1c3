"""`python -m services.mail`: the mail sandbox."""

from services.http_process import SandboxSettings, read, serve_http
from services.mail.app import create_app

if __name__ == "__main__":
    settings = read(SandboxSettings)
    serve_http("mail", create_app(settings.DATABASE_URL, settings.SANDBOX_ADMIN_PASSWORD), "MAIL_", 8002)
