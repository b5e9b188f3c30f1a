"""Account-level API routes: users."""

from rest_framework.routers import SimpleRouter

from console.users_api import UserViewSet

router = SimpleRouter(trailing_slash=True)
router.register("users", UserViewSet, basename="user")

urlpatterns = router.urls
